//! Finds `{{mint:ALIAS}}` placeholders in a request and reports where each one sits.
//!
//! Runs after the target is parsed and before any policy decision: the proxy refuses a request
//! whose placeholders are malformed, too many, or in a forbidden place, and hands the rest to the
//! evaluator as [`AliasUse`]s. `inject.rs` runs the same scan again to substitute, so what is
//! substituted is exactly what was checked. This module never sees a secret value, and its errors
//! carry a position and a place, never the text around it.
//!
//! # Grammar and spellings
//!
//! A placeholder is `{{mint:NAME}}` with NAME matching `[a-z0-9][a-z0-9_-]{0,63}`
//! ([`is_alias_name`](mint_policy::policy::is_alias_name)); the prefix `{{mint:` is
//! case-sensitive. Once the prefix is seen, anything but a valid name followed by `}}` is a
//! [`PlaceholderError::Malformed`].
//!
//! Each part of the request is decoded the way its receiver decodes it before the placeholder is
//! looked for, so no spelling slips past the scan:
//!
//! - URL parts (scheme, authority, path, query), header names and values, and non-JSON bodies are
//!   percent-decoded once, any mix of escapes and hex case included: `%7B%7Bmint%3Agithub%7D%7D`,
//!   `{{mint%3Agithub}}` and `%7b%7bmint:github%7d%7d` are all the placeholder `github`.
//! - String tokens of a JSON body are JSON-unescaped and then percent-decoded.
//!
//! Where a placeholder may be substituted depends on the part and on its spelling:
//!
//! | part | spelling | [`Place`] |
//! |---|---|---|
//! | header value | raw `{{mint:x}}` | `Site(Header)` |
//! | header value | percent-encoded in any way | `Forbidden(EncodedInHeader)` |
//! | query | any | `Site(Query)` |
//! | string value of a JSON body, at a place its alias names | raw | `Site(Body)` |
//! | string value of a JSON body, at a place its alias names | JSON- or percent-escaped | `Forbidden(EncodedInJson)` |
//! | value of a form body's field its alias names (before any raw `;`) | any | `Site(Body)` |
//! | anywhere else in a body | any | inert: [`Skipped`] |
//! | header name | any | `Forbidden(HeaderName)` |
//! | scheme, authority, path | any | `Forbidden(Target)` |
//!
//! So nothing that reads as a placeholder in the target or the headers is silently forwarded: it
//! is substituted or the request is refused. In a body, only a place an alias names
//! ([`BodyPlaces`]) is live; a placeholder anywhere else in the body (another string value, a
//! member name, a body that is not JSON or has a content coding, an undeclared alias, a malformed
//! spelling) is inert: Mint never substitutes there, so it forwards the text unchanged and
//! records the alias and the kind of place in [`Skipped`] (bounded: at most
//! [`MAX_SKIPPED`] entries and a count). An agent quotes its own
//! placeholders in a conversation; refusing those requests would cut it off from its model.
//! Inert quotes do not count toward [`MAX_PLACEHOLDERS`]. A malformed placeholder in a string
//! value is still refused when an alias names that place: there it was meant as a credential.
//!
//! # JSON bodies
//!
//! A body is JSON when the request has exactly one `Content-Type` whose media type is
//! `application/json` or `application/<x>+json` ([`body_is_json`]), it has no content coding,
//! and it reads as JSON by the rule the MCP `tools/call` check follows too
//! ([`json_start`](mint_policy::body::json_start)): one optional UTF-8 byte order mark, then one
//! or more strict RFC 8259 JSON texts (JSON Lines; each text's pointers start at its own root):
//! UTF-8, no trailing commas or comments, escapes well-formed, surrogate escapes paired, at most
//! 127 levels of nesting (as serde_json). So the tool the policy matched and the places the scan
//! considered are read from the same view of the body. The tokenizer never builds objects, so
//! duplicate keys are neither detected nor rejected here: every string value is a body site
//! whichever duplicate a receiver keeps, and the bytes forwarded are the bytes checked (the MCP
//! `tools/call` check parses with duplicate keys rejected on its own).
//!
//! # Form bodies
//!
//! A body is a form when the one `Content-Type` is `application/x-www-form-urlencoded` and it
//! has no content coding. It is split as the WHATWG URL Standard's parser splits it (at `&`,
//! then each field at its first `=`), each field name decoded (`+` as space, `%XX`) and looked
//! up among the aliases' form fields. In the value of a named field the placeholder counts in
//! any percent-encoded spelling, since the receiver decodes the value before reading it
//! (`Site(Body)`; the secret is written percent-encoded); a raw `;` in the value ends what is
//! live (a parser that splits at `;` would see another field after it). Field names, other
//! fields' values and a named field's value after `;` are inert (`form_key`, `form_value`).
//! Repeated fields are each a site, as duplicate JSON members are.
//!
//! A body with a content coding is forwarded as it came and never substituted in; the proxy
//! refuses one whose decoded text holds a placeholder at a named place
//! ([`live_in_encoded_body`]).
//! A body is only tokenized when it could hold a placeholder at all (it contains `mint`, a `%3x`,
//! `%6x` or `%7x` escape, or `\u00`), so most bodies cost a few `memchr` passes.

use std::fmt;
use std::ops::Range;

use http::{HeaderMap, HeaderName};
use memchr::memmem;
use mint_policy::audit::MAX_SKIPPED;
use mint_policy::body::{BodyPlaces, InertPlace, NamedPlace, form_decode};
use mint_policy::evaluate::AliasUse;
use mint_policy::site::{Site, SiteSet};

mod json;
pub mod shaped;
mod spelling;

use shaped::ShapedPlaceholders;
use spelling::{Event, Layer};

/// The most placeholders one request may hold (DESIGN.md, limits).
pub const MAX_PLACEHOLDERS: usize = 16;

/// The parts of a request that are scanned, as the proxy received them.
///
/// Pass exactly what will be forwarded: the headers after `Mint-Capability`, `Proxy-*` and
/// hop-by-hop headers are stripped, and the whole (size-limited) body.
#[derive(Clone, Copy)]
pub struct RequestParts<'a> {
    /// The scheme as written in the proxied URL.
    pub scheme: &'a str,
    /// The authority (`host` or `host:port`) as written.
    pub authority: &'a str,
    /// The path as written, without the query.
    pub path: &'a str,
    /// The query after `?`, as written; `None` without `?`.
    pub query: Option<&'a str>,
    /// The headers to forward.
    pub headers: &'a HeaderMap,
    /// The body to forward.
    pub body: &'a [u8],
}

/// One part of a request, named in [`Found`] and in errors.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Part {
    /// The scheme of the target.
    Scheme,
    /// The authority of the target.
    Authority,
    /// The path of the target.
    Path,
    /// The query of the target.
    Query,
    /// The header with this name (its name or its value).
    Header(HeaderName),
    /// The body.
    Body,
}

/// Where a found placeholder sits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Place {
    /// In a site where it can be substituted, if the alias and the deciding rule allow that site.
    Site(Site),
    /// Somewhere no placeholder may be: the request is refused (403) before any connection.
    Forbidden(Forbidden),
}

/// The places where a placeholder is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Forbidden {
    /// The scheme, authority or path of the target.
    Target,
    /// A header name.
    HeaderName,
    /// A header value, percent-encoded: a header is forwarded as written, never decoded.
    EncodedInHeader,
    /// A string value of a JSON body at a place its alias names, spelled with JSON or percent
    /// escapes: substitution splices the raw spelling only.
    EncodedInJson,
}

/// One placeholder found in a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    /// The alias it names.
    pub alias: String,
    /// Where it sits.
    pub place: Place,
    /// The part of the request it is in.
    pub part: Part,
    /// Its bytes in the part as received (in the body for a JSON string), escapes included.
    pub span: Range<usize>,
    /// In a body, the pointer or form field of the alias it sits at (`None` elsewhere).
    pub matched: Option<NamedPlace>,
}

/// Every placeholder of a request, in the order found: target, query, headers, body.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Placeholders {
    found: Vec<Found>,
    skipped: Skipped,
}

/// The placeholders a body quoted where Mint never substitutes, forwarded as text: each alias
/// and kind of place once (at most [`MAX_SKIPPED`]), and how many there were in all. Names no
/// pointer, field or offset: those are the agent's body.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Skipped {
    listed: Vec<(String, InertPlace)>,
    count: u64,
}

/// Why a request's placeholders were refused. Names a place and a byte offset, never text.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PlaceholderError {
    /// `{{mint:` not followed by an alias name and `}}`.
    #[error("malformed placeholder in the {part} at byte {offset}: {reason}")]
    Malformed {
        /// The part it is in.
        part: Part,
        /// The offset of its `{{` (or the escape spelling it) in the part.
        offset: usize,
        /// What is wrong.
        reason: MalformedReason,
    },
    /// More placeholders than the limit.
    #[error("more than {limit} placeholders in one request")]
    TooMany {
        /// The limit.
        limit: usize,
    },
}

/// What is wrong with a malformed placeholder.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MalformedReason {
    /// No `}}` follows the name.
    Unclosed,
    /// `}}` follows, but the name is not an alias name.
    InvalidName,
}

// === impl Part ===

impl fmt::Display for Part {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Part::Scheme => f.write_str("scheme"),
            Part::Authority => f.write_str("authority"),
            Part::Path => f.write_str("path"),
            Part::Query => f.write_str("query"),
            Part::Header(name) => write!(f, "header `{name}`"),
            Part::Body => f.write_str("body"),
        }
    }
}

// === impl Place ===

impl Place {
    /// The site, when the place is one.
    pub fn site(self) -> Option<Site> {
        match self {
            Place::Site(site) => Some(site),
            Place::Forbidden(_) => None,
        }
    }
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Place::Site(site) => site.fmt(f),
            Place::Forbidden(forbidden) => forbidden.fmt(f),
        }
    }
}

// === impl Forbidden ===

impl fmt::Display for Forbidden {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Forbidden::Target => "the target's scheme, authority or path",
            Forbidden::HeaderName => "a header name",
            Forbidden::EncodedInHeader => "a percent-encoded header value",
            Forbidden::EncodedInJson => "an escaped JSON string",
        })
    }
}

// === impl Placeholders ===

impl Placeholders {
    /// Every placeholder, in the order found.
    pub fn found(&self) -> &[Found] {
        &self.found
    }

    /// Whether the request holds no placeholder that is substituted or refused (inert quotes
    /// aside).
    pub fn is_empty(&self) -> bool {
        self.found.is_empty()
    }

    /// The placeholders the body quoted as text.
    pub fn skipped(&self) -> &Skipped {
        &self.skipped
    }

    /// The placeholders in a forbidden place; the proxy refuses the request when there is one.
    pub fn forbidden(&self) -> impl Iterator<Item = &Found> {
        self.found
            .iter()
            .filter(|found| matches!(found.place, Place::Forbidden(_)))
    }

    /// Every alias named, forbidden places included, sorted and without repeats: what the
    /// unknown-alias check looks up.
    pub fn aliases(&self) -> Vec<&str> {
        let mut aliases: Vec<&str> = self.found.iter().map(|f| f.alias.as_str()).collect();
        aliases.sort_unstable();
        aliases.dedup();
        aliases
    }

    /// The aliases in sites with the sites each sits in, sorted by alias: the evaluator's input.
    /// Placeholders in forbidden places are left out; refuse those first ([`Self::forbidden`]).
    pub fn alias_uses(&self) -> Vec<AliasUse> {
        let mut uses: Vec<AliasUse> = Vec::new();
        for found in &self.found {
            let Place::Site(site) = found.place else {
                continue;
            };
            match uses.iter_mut().find(|u| u.alias == found.alias) {
                Some(alias_use) => alias_use.sites = alias_use.sites.with(site),
                None => uses.push(AliasUse {
                    alias: found.alias.clone(),
                    sites: SiteSet::EMPTY.with(site),
                }),
            }
        }
        uses.sort_unstable_by(|a, b| a.alias.cmp(&b.alias));
        uses
    }
}

// === impl Skipped ===

impl Skipped {
    /// Each alias quoted as text with the kind of place, once, in the order first seen; at most
    /// [`MAX_SKIPPED`]. Malformed placeholders name no alias and are only counted.
    pub fn listed(&self) -> &[(String, InertPlace)] {
        &self.listed
    }

    /// How many placeholders were quoted as text, malformed ones included.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Whether nothing was quoted as text.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    fn add(&mut self, alias: Option<String>, place: InertPlace) {
        self.count = self.count.saturating_add(1);
        if let Some(alias) = alias
            && self.listed.len() < MAX_SKIPPED
            && !self.listed.iter().any(|(a, p)| *p == place && *a == alias)
        {
            self.listed.push((alias, place));
        }
    }
}

// === impl PlaceholderError ===

impl PlaceholderError {
    /// The stable error code for the client: `malformed_placeholder` or `invalid_request`.
    pub fn code(&self) -> &'static str {
        match self {
            PlaceholderError::Malformed { .. } => "malformed_placeholder",
            PlaceholderError::TooMany { .. } => "invalid_request",
        }
    }
}

impl fmt::Display for MalformedReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MalformedReason::Unclosed => "`{{mint:` must be followed by an alias name and `}}`",
            MalformedReason::InvalidName => "the alias name must match `[a-z0-9][a-z0-9_-]{0,63}`",
        })
    }
}

impl fmt::Debug for RequestParts<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Header values, the query and the body are request data: show their sizes only.
        f.debug_struct("RequestParts")
            .field("scheme", &self.scheme)
            .field("authority", &self.authority)
            .field("path", &self.path)
            .field("query_len", &self.query.map(str::len))
            .field("headers", &self.headers.len())
            .field("body_len", &self.body.len())
            .finish_non_exhaustive()
    }
}

/// Finds every placeholder of a request, refusing more than [`MAX_PLACEHOLDERS`] that are not
/// inert; `places` says where in a body each alias may be substituted.
pub fn scan(
    parts: &RequestParts<'_>,
    places: &BodyPlaces,
    shaped: &ShapedPlaceholders,
) -> Result<Placeholders, PlaceholderError> {
    scan_with_limit(parts, places, shaped, MAX_PLACEHOLDERS)
}

/// Finds every placeholder of a request, refusing more than `limit` that are not inert.
/// `shaped` are the aliases' value-shaped placeholders, read wherever `{{mint:NAME}}` is.
pub fn scan_with_limit(
    parts: &RequestParts<'_>,
    places: &BodyPlaces,
    shaped: &ShapedPlaceholders,
    limit: usize,
) -> Result<Placeholders, PlaceholderError> {
    let mut sink = Sink::new(limit, shaped);
    scan_url_part(Part::Scheme, parts.scheme.as_bytes(), &mut sink)?;
    scan_url_part(Part::Authority, parts.authority.as_bytes(), &mut sink)?;
    scan_url_part(Part::Path, parts.path.as_bytes(), &mut sink)?;
    if let Some(query) = parts.query {
        scan_url_part(Part::Query, query.as_bytes(), &mut sink)?;
    }
    for (name, value) in parts.headers {
        scan_header(name, value.as_bytes(), &mut sink)?;
    }
    scan_body(parts.headers, parts.body, places, &mut sink)?;
    Ok(Placeholders {
        found: sink.found,
        skipped: sink.skipped,
    })
}

/// How a body is read for placeholders, by its headers ([`body_kind`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyKind {
    /// A JSON body ([`body_is_json`]) without a content coding: live at the aliases' pointers.
    Json,
    /// An `application/x-www-form-urlencoded` body without a content coding: live in the values
    /// of the aliases' form fields.
    Form,
    /// Anything else (another media type, no or several `Content-Type`s, a content coding):
    /// every placeholder in it is inert.
    Text,
}

/// How the body of a request with these headers is read: the one rule both the check
/// ([`scan`]) and the substitution (`inject::body`) follow.
pub fn body_kind(headers: &HeaderMap) -> BodyKind {
    if has_content_coding(headers) {
        return BodyKind::Text;
    }
    media_kind(headers)
}

/// How a body of this `Content-Type` is read once decoded from its content coding.
fn media_kind(headers: &HeaderMap) -> BodyKind {
    match media_type(headers).as_deref() {
        Some("application/x-www-form-urlencoded") => BodyKind::Form,
        Some(media) if is_json_media(media) => BodyKind::Json,
        _ => BodyKind::Text,
    }
}

/// Whether the headers declare a JSON body: exactly one `Content-Type`, with the media type
/// `application/json` or `application/<x>+json` (any case, parameters ignored).
pub fn body_is_json(headers: &HeaderMap) -> bool {
    media_type(headers).is_some_and(|media| is_json_media(&media))
}

/// The media type of the one `Content-Type`, lowercase, without parameters; `None` without one
/// or with several.
fn media_type(headers: &HeaderMap) -> Option<String> {
    let mut values = headers.get_all(http::header::CONTENT_TYPE).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return None;
    };
    let text = value.to_str().ok()?;
    Some(
        text.split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase(),
    )
}

fn is_json_media(media: &str) -> bool {
    let Some(subtype) = media.strip_prefix("application/") else {
        return false;
    };
    subtype == "json" || (subtype.len() > "+json".len() && subtype.ends_with("+json"))
}

/// Whether a body has a content coding (`Content-Encoding` other than `identity`): its bytes are
/// not the text a receiver reads, so no place in it is live.
pub fn has_content_coding(headers: &HeaderMap) -> bool {
    headers
        .get_all(http::header::CONTENT_ENCODING)
        .iter()
        .any(|value| {
            value.as_bytes().split(|&b| b == b',').any(|coding| {
                let coding = coding.trim_ascii();
                !coding.is_empty() && !coding.eq_ignore_ascii_case(b"identity")
            })
        })
}

/// For a body with a content coding, which Mint forwards as it came and never substitutes in:
/// the first alias whose placeholder its decoded text (`decoded`, as the receiver reads it)
/// holds at a place that alias names, as if the body had been sent without the coding (a
/// malformed placeholder at a named place counts, with no alias: `Some(None)`). `None` when the
/// body has no coding or holds no such placeholder. The proxy refuses such a request rather
/// than forward the placeholder silently as text.
pub fn live_in_encoded_body(
    headers: &HeaderMap,
    decoded: &[u8],
    places: &BodyPlaces,
    shaped: &ShapedPlaceholders,
) -> Option<Option<String>> {
    if !has_content_coding(headers) {
        return None;
    }
    let kind = media_kind(headers);
    if kind == BodyKind::Text || !may_hold_placeholder(decoded, kind == BodyKind::Json, shaped) {
        return None;
    }
    let mut sink = Sink::new(usize::MAX, shaped);
    let scanned = match kind {
        BodyKind::Json => match json_strings(decoded, places, shaped) {
            Some(strings) => scan_json(decoded, &strings, places, &mut sink),
            None => return None,
        },
        BodyKind::Form => scan_form(decoded, places, &mut sink),
        BodyKind::Text => return None,
    };
    match scanned {
        Err(_) => Some(None),
        Ok(()) => sink.found.into_iter().next().map(|found| Some(found.alias)),
    }
}

/// Collects found placeholders up to a limit, and counts inert ones; carries the shaped
/// placeholders every part is read for.
pub(crate) struct Sink<'s> {
    found: Vec<Found>,
    skipped: Skipped,
    limit: usize,
    shaped: &'s ShapedPlaceholders,
}

impl<'s> Sink<'s> {
    pub(crate) fn new(limit: usize, shaped: &'s ShapedPlaceholders) -> Sink<'s> {
        Sink {
            found: Vec::new(),
            skipped: Skipped::default(),
            limit,
            shaped,
        }
    }

    pub(crate) fn into_found(self) -> Vec<Found> {
        self.found
    }

    fn push(&mut self, found: Found) -> Result<(), PlaceholderError> {
        if self.found.len() >= self.limit {
            return Err(PlaceholderError::TooMany { limit: self.limit });
        }
        self.found.push(found);
        Ok(())
    }
}

/// Scans a URL part: the query is a site, every other part is forbidden.
pub(crate) fn scan_url_part(
    part: Part,
    raw: &[u8],
    sink: &mut Sink<'_>,
) -> Result<(), PlaceholderError> {
    let place = match part {
        Part::Query => Place::Site(Site::Query),
        _ => Place::Forbidden(Forbidden::Target),
    };
    let shaped = sink.shaped;
    spelling::hits(raw, Layer::Percent, shaped, &part, |hit| {
        sink.push(Found {
            alias: hit.alias,
            place,
            part: part.clone(),
            span: hit.span,
            matched: None,
        })
    })
}

/// Scans one header: its name (forbidden) and its value (a site when spelled raw).
pub(crate) fn scan_header(
    name: &HeaderName,
    value: &[u8],
    sink: &mut Sink<'_>,
) -> Result<(), PlaceholderError> {
    let part = Part::Header(name.clone());
    let shaped = sink.shaped;
    spelling::hits(
        name.as_str().as_bytes(),
        Layer::Percent,
        shaped,
        &part,
        |hit| {
            sink.push(Found {
                alias: hit.alias,
                place: Place::Forbidden(Forbidden::HeaderName),
                part: part.clone(),
                span: hit.span,
                matched: None,
            })
        },
    )?;
    spelling::hits(value, Layer::Percent, shaped, &part, |hit| {
        let place = if hit.raw {
            Place::Site(Site::Header)
        } else {
            Place::Forbidden(Forbidden::EncodedInHeader)
        };
        sink.push(Found {
            alias: hit.alias,
            place,
            part: part.clone(),
            span: hit.span,
            matched: None,
        })
    })
}

/// Scans the body: a placeholder of a JSON string value at a pointer its alias names, or in the
/// value of a form field its alias names, is a body site (in JSON refused when escaped; a
/// malformed one at any named place is refused); every other one is inert and only counted in
/// the sink.
pub(crate) fn scan_body(
    headers: &HeaderMap,
    body: &[u8],
    places: &BodyPlaces,
    sink: &mut Sink<'_>,
) -> Result<(), PlaceholderError> {
    let kind = body_kind(headers);
    let shaped = sink.shaped;
    if !may_hold_placeholder(body, kind == BodyKind::Json, shaped) {
        return Ok(());
    }
    match kind {
        BodyKind::Json => {
            if let Some(strings) = json_strings(body, places, shaped) {
                return scan_json(body, &strings, places, sink);
            }
        }
        BodyKind::Form => return scan_form(body, places, sink),
        BodyKind::Text => {}
    }
    spelling::events(body, Layer::Percent, shaped, |event| {
        let alias = match event {
            Event::Hit(hit) => Some(hit.alias),
            Event::Malformed { .. } => None,
        };
        sink.skipped.add(alias, InertPlace::Text);
        Ok(())
    })
}

fn scan_json(
    body: &[u8],
    strings: &[json::StringToken],
    places: &BodyPlaces,
    sink: &mut Sink<'_>,
) -> Result<(), PlaceholderError> {
    let shaped = sink.shaped;
    for string in strings {
        // INVARIANT: the tokenizer reports ranges within `body`.
        let content = &body[string.content.clone()];
        let offset = string.content.start;
        spelling::events(content, Layer::JsonPercent, shaped, |event| {
            match event {
                Event::Hit(hit)
                    if string
                        .node
                        .is_some_and(|node| places.names(node, &hit.alias)) =>
                {
                    let place = if hit.raw {
                        Place::Site(Site::Body)
                    } else {
                        Place::Forbidden(Forbidden::EncodedInJson)
                    };
                    let matched = string
                        .node
                        .and_then(|node| places.pointer(node))
                        .map(|pointer| NamedPlace::Pointer(pointer.to_owned()));
                    sink.push(Found {
                        alias: hit.alias,
                        place,
                        part: Part::Body,
                        span: hit.span.start + offset..hit.span.end + offset,
                        matched,
                    })?;
                }
                Event::Hit(hit) => sink.skipped.add(Some(hit.alias), inert(string.is_key)),
                Event::Malformed { offset: at, reason }
                    if string.node.is_some_and(|node| places.is_named(node)) =>
                {
                    return Err(PlaceholderError::Malformed {
                        part: Part::Body,
                        offset: at + offset,
                        reason,
                    });
                }
                Event::Malformed { .. } => sink.skipped.add(None, inert(string.is_key)),
            }
            Ok(())
        })?;
    }
    Ok(())
}

/// Scans an `application/x-www-form-urlencoded` body field by field, as the WHATWG URL
/// Standard's parser splits it: at every `&`, then each field at its first `=` (a field without
/// `=` is a name with an empty value). A field's name is decoded ([`form_decode`]: `+` and `%XX`)
/// and looked up in `places`. In the value of a field an alias names, its placeholder in any
/// spelling is a body site (the receiver undoes the percent-encoding, so `%7B%7Bmint%3Ax%7D%7D`
/// reads as the placeholder there), and a malformed one is refused; except after a raw `;` in
/// the value, where a parser that also splits at `;` (old Rack, `cgi`) would see another field:
/// there it is inert. Placeholders in field names and in other fields' values are inert. Every
/// field is looked at, so each of several fields with a named name is a site, whichever one a
/// receiver keeps.
fn scan_form(
    body: &[u8],
    places: &BodyPlaces,
    sink: &mut Sink<'_>,
) -> Result<(), PlaceholderError> {
    let shaped = sink.shaped;
    let mut start = 0;
    for field in body.split(|&b| b == b'&') {
        let offset = start;
        start += field.len() + 1;
        let (name, value, value_offset) = match memchr::memchr(b'=', field) {
            Some(at) => (&field[..at], &field[at + 1..], offset + at + 1),
            None => (field, &field[field.len()..], offset + field.len()),
        };
        spelling::events(name, Layer::Percent, shaped, |event| {
            let alias = match event {
                Event::Hit(hit) => Some(hit.alias),
                Event::Malformed { .. } => None,
            };
            sink.skipped.add(alias, InertPlace::FormKey);
            Ok(())
        })?;
        if !may_hold_placeholder(value, false, shaped) {
            continue;
        }
        let decoded = places
            .has_form_fields()
            .then(|| form_decode(name))
            .filter(|decoded| places.is_named_form_field(decoded));
        // Placeholders after a raw `;` are never live.
        let live_end = memchr::memchr(b';', value).unwrap_or(value.len());
        spelling::events(value, Layer::Percent, shaped, |event| {
            match (event, &decoded) {
                (Event::Hit(hit), Some(field))
                    if hit.span.start < live_end && places.names_form_field(field, &hit.alias) =>
                {
                    sink.push(Found {
                        alias: hit.alias,
                        place: Place::Site(Site::Body),
                        part: Part::Body,
                        span: hit.span.start + value_offset..hit.span.end + value_offset,
                        matched: Some(NamedPlace::FormField(
                            String::from_utf8_lossy(field).into_owned(),
                        )),
                    })?;
                }
                (Event::Hit(hit), _) => sink.skipped.add(Some(hit.alias), InertPlace::FormValue),
                (Event::Malformed { offset: at, reason }, Some(_)) if at < live_end => {
                    return Err(PlaceholderError::Malformed {
                        part: Part::Body,
                        offset: at + value_offset,
                        reason,
                    });
                }
                (Event::Malformed { .. }, _) => sink.skipped.add(None, InertPlace::FormValue),
            }
            Ok(())
        })?;
    }
    Ok(())
}

fn inert(is_key: bool) -> InertPlace {
    if is_key {
        InertPlace::JsonKey
    } else {
        InertPlace::JsonValue
    }
}

/// Whether `body` can hold a placeholder in any spelling. Its decoded form holds `mint`; each of
/// those letters, the braces and the colon is either raw or escaped as `%3x`, `%6x` or `%7x`, or
/// (in JSON) as `\u00xx`; so a body with none of `mint`, those escapes and `\u00` holds none.
/// A shaped value is made of letters, digits, `-`, `_` and `.`, escaped as `%2x` to `%7x` or
/// `\u00xx`: with shaped placeholders, a body with any `%` or `\` may hold one, and one
/// without holds one only raw.
fn may_hold_placeholder(body: &[u8], json: bool, shaped: &ShapedPlaceholders) -> bool {
    memmem::find(body, b"mint").is_some()
        || memchr::memchr_iter(b'%', body)
            .any(|at| matches!(body.get(at + 1), Some(b'3' | b'6' | b'7')))
        || (json && memmem::find(body, b"\\u00").is_some())
        || (!shaped.is_empty()
            && (memchr::memchr(b'%', body).is_some()
                || (json && memchr::memchr(b'\\', body).is_some())
                || shaped.holds_raw_value(body)))
}

/// The string tokens of a JSON body the scan reads: those that can spell `{{mint:`, or every one
/// when a shaped value could sit in any.
fn json_strings(
    body: &[u8],
    places: &BodyPlaces,
    shaped: &ShapedPlaceholders,
) -> Option<Vec<json::StringToken>> {
    if shaped.is_empty() {
        json::candidate_strings(body, places)
    } else {
        json::all_strings(body, places)
    }
}

#[cfg(test)]
mod tests;
