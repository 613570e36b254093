//! Injects brokered credentials into an authorized outbound request, and builds the scrubber for
//! its answer.
//!
//! Runs after the policy allowed the request and its decision record is written; never decides
//! access itself. The only module allowed to call `expose_secret()`, and it does so in one
//! function (`Entry::bytes`). Each function here scans its part of the request again with the
//! same code as `placeholder::scan`, so it substitutes exactly the placeholders that were checked,
//! and it fails closed: a placeholder in a forbidden place, an alias without a resolved secret or
//! a site the secret is not released for is an error, and nothing is changed.
//!
//! - Headers: the raw placeholder in a value becomes the secret, through `HeaderValue` marked
//!   sensitive; a secret with CR, LF, NUL or another byte a header cannot carry is refused.
//! - Query: every spelling of the placeholder becomes the secret percent-encoded (every byte
//!   outside RFC 3986 unreserved, uppercase hex).
//! - Body: in string values of a JSON body at the aliases' pointers, the raw placeholder becomes
//!   the secret JSON-escaped (`\"`, `\\`, `\b \f \n \r \t`, `\u00XX` for other control
//!   characters); in the values of a form body's named fields, the placeholder in any spelling
//!   becomes the secret percent-encoded as the query's is. Spliced into the bytes received:
//!   every other byte of the body is forwarded as it came.
//!
//! Scratch buffers holding a secret (a header value, the URI text) are wiped when dropped; what is
//! handed on to `http` and the network stack (header values, the URI, the body) is not under
//! Mint's control.
//!
//! # Flow in the proxy
//!
//! ```text
//! let found = placeholder::scan(&parts)?;          // 400 malformed_placeholder / invalid_request
//! found.forbidden().next() => 403                   // before any connection
//! found.aliases() => unknown alias 400; found.alias_uses() => bindings, narrowing, policy
//! secrets.insert(alias, value.as_secret().clone(), alias sites ∩ rule inject)   // per alias
//! let body = inject::body(&headers, body, &secrets)?;   // reads Content-Type: before headers
//! inject::headers(&mut headers, &secrets)?;
//! let uri = inject::uri(&target, &secrets)?;
//! let mut scrubber = secrets.scrubber()?;          // or a cached one's `fresh()`
//! scrubber.scrub_headers(&mut answer_headers); scrubber.push(chunk)...; scrubber.finish()
//! ```

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Uri};
use mint_policy::body::BodyPlaces;
use mint_policy::normalize::Target;
use mint_policy::site::{Site, SiteSet};
use secrecy::{ExposeSecret, SecretString};
use zeroize::Zeroizing;

use crate::secrets::placeholder::shaped::ShapedPlaceholders;
use crate::secrets::placeholder::{
    self, BodyKind, Forbidden, Found, Part, Place, PlaceholderError, Sink,
};
use crate::secrets::reserve_wiped;
use crate::secrets::scrub::{Baseline, ScrubError, Scrubber};

/// The resolved secrets of one request, by alias, each with the sites it is released for (the
/// sites both the alias and the deciding rule allow).
#[derive(Default)]
pub struct Secrets {
    entries: BTreeMap<String, Entry>,
    /// The aliases' value-shaped placeholders, substituted as `{{mint:NAME}}` is.
    shaped: Arc<ShapedPlaceholders>,
}

/// Why a request could not be given its secrets. Names aliases, parts and headers, never values.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InjectError {
    /// A malformed placeholder (the scan before the decision reports it first).
    #[error(transparent)]
    Placeholder(#[from] PlaceholderError),
    /// A placeholder where none may be substituted.
    #[error("placeholder for alias `{alias}` in the {part} is in {place}")]
    Forbidden {
        /// The alias it names.
        alias: String,
        /// The part it is in.
        part: Part,
        /// Where it sits.
        place: Forbidden,
    },
    /// A placeholder whose alias has no resolved secret.
    #[error("no secret was resolved for alias `{alias}`")]
    MissingSecret {
        /// The alias.
        alias: String,
    },
    /// A placeholder in a site its secret is not released for.
    #[error("alias `{alias}` is not released for the {site} site")]
    SiteNotAllowed {
        /// The alias.
        alias: String,
        /// The site.
        site: Site,
    },
    /// A secret a header cannot carry.
    #[error("the secret of alias `{alias}` holds a control character: not sent in `{header}`")]
    HeaderValue {
        /// The alias.
        alias: String,
        /// The header.
        header: http::HeaderName,
    },
    /// The upstream URI did not parse after substitution.
    #[error("the upstream URI is not valid")]
    Uri,
}

/// One resolved secret.
struct Entry {
    value: SecretString,
    sites: SiteSet,
}

// === impl Secrets ===

impl Secrets {
    /// No secrets.
    pub fn new() -> Secrets {
        Secrets::default()
    }

    /// Adds the secret of `alias`, released for `sites`; replaces an earlier one.
    pub fn insert(&mut self, alias: impl Into<String>, value: SecretString, sites: SiteSet) {
        self.entries.insert(alias.into(), Entry { value, sites });
    }

    /// Substitutes the value-shaped placeholders of `shaped` too, wherever it substitutes
    /// `{{mint:NAME}}` (the same the check scanned with).
    pub fn with_shaped(mut self, shaped: Arc<ShapedPlaceholders>) -> Secrets {
        self.shaped = shaped;
        self
    }

    /// The number of secrets.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there is no secret.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Adds every secret of `other` whose value is not held yet, under a name no alias can have
    /// (`retired:N`), released for no site: kept for scrubbing only. A reload keeps the secrets
    /// it replaces this way, so an upstream that saw an old value cannot hand it back.
    ///
    /// Linear in the two sets' sizes: the values held are looked up in a set, not compared with
    /// every one (a reload of an alias file with tens of thousands of aliases compared each old
    /// value with each new one).
    pub fn absorb(&mut self, other: &Secrets) {
        // Borrowed, never copied: no stray copy of a value is left in freed memory.
        let mut seen: HashSet<&[u8]> = self.entries.values().map(Entry::bytes).collect();
        let missing: Vec<&Entry> = other
            .entries
            .values()
            .filter(|entry| seen.insert(entry.bytes()))
            .collect();
        drop(seen);
        let mut n = self.entries.len();
        for entry in missing {
            while self.entries.contains_key(&format!("retired:{n}")) {
                n += 1;
            }
            self.entries.insert(
                format!("retired:{n}"),
                Entry {
                    value: entry.value.clone(),
                    sites: SiteSet::EMPTY,
                },
            );
        }
    }

    /// The scrubber for the answer: redacts every secret held here.
    pub fn scrubber(&self) -> Result<Scrubber, ScrubError> {
        Scrubber::from_secrets(self.entries.values().map(Entry::bytes))
    }

    /// A plain automaton over the same patterns, for the scrub benchmark.
    #[doc(hidden)]
    pub fn baseline(&self) -> Result<Baseline, ScrubError> {
        Baseline::from_secrets(self.entries.values().map(Entry::bytes))
    }

    /// The secret for a placeholder found at `site`, checked against its release.
    fn for_site(&self, alias: &str, site: Site) -> Result<&[u8], InjectError> {
        let entry = self
            .entries
            .get(alias)
            .ok_or_else(|| InjectError::MissingSecret {
                alias: alias.to_owned(),
            })?;
        if !entry.sites.contains(site) {
            return Err(InjectError::SiteNotAllowed {
                alias: alias.to_owned(),
                site,
            });
        }
        Ok(entry.bytes())
    }
}

impl fmt::Debug for Secrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let aliases: Vec<&str> = self.entries.keys().map(String::as_str).collect();
        f.debug_struct("Secrets")
            .field("aliases", &aliases)
            .finish_non_exhaustive()
    }
}

// === impl Entry ===

impl Entry {
    fn bytes(&self) -> &[u8] {
        // EXPOSE: the one place Mint reads a secret value to put it into a request or derive the
        // scrubber's patterns from it.
        self.value.expose_secret().as_bytes()
    }
}

/// Substitutes the raw placeholders in header values. On error nothing is changed.
pub fn headers(headers: &mut HeaderMap, secrets: &Secrets) -> Result<(), InjectError> {
    let mut replacements: Vec<(usize, HeaderValue)> = Vec::new();
    for (index, (name, value)) in headers.iter().enumerate() {
        let mut sink = Sink::new(usize::MAX, &secrets.shaped);
        placeholder::scan_header(name, value.as_bytes(), &mut sink)?;
        let found = sink.into_found();
        if found.is_empty() {
            continue;
        }
        let mut out = Zeroizing::new(Vec::new());
        splice(
            &mut out,
            value.as_bytes(),
            &found,
            (Site::Header, <[u8]>::len),
            secrets,
            |out, alias, secret| {
                // CR, LF and NUL would let a value end the header; other control bytes are refused
                // by `HeaderValue` too. Checked here to name the alias.
                if secret
                    .iter()
                    .any(|&b| (b < 0x20 && b != b'\t') || b == 0x7f)
                {
                    return Err(InjectError::HeaderValue {
                        alias: alias.to_owned(),
                        header: name.clone(),
                    });
                }
                out.extend_from_slice(secret);
                Ok(())
            },
        )?;
        let mut value = HeaderValue::from_bytes(&out).map_err(|_| InjectError::HeaderValue {
            alias: found.first().map(|f| f.alias.clone()).unwrap_or_default(),
            header: name.clone(),
        })?;
        value.set_sensitive(true);
        replacements.push((index, value));
    }
    if replacements.is_empty() {
        return Ok(());
    }
    let mut replacements = replacements.into_iter().peekable();
    for (index, (_, value)) in headers.iter_mut().enumerate() {
        if let Some((_, new)) = replacements.next_if(|(at, _)| *at == index) {
            *value = new;
        }
    }
    Ok(())
}

/// The upstream URI of `target` with the placeholders of its query substituted, percent-encoded.
/// Refuses a placeholder in the authority or the path.
pub fn uri(target: &Target, secrets: &Secrets) -> Result<Uri, InjectError> {
    let authority = target.authority();
    let mut sink = Sink::new(usize::MAX, &secrets.shaped);
    placeholder::scan_url_part(Part::Authority, authority.as_bytes(), &mut sink)?;
    placeholder::scan_url_part(Part::Path, target.path.as_bytes(), &mut sink)?;
    if let Some(found) = sink.into_found().into_iter().next() {
        return Err(forbidden(found));
    }
    let mut query_out = Zeroizing::new(Vec::new());
    if let Some(query) = &target.query {
        let mut sink = Sink::new(usize::MAX, &secrets.shaped);
        placeholder::scan_url_part(Part::Query, query.as_bytes(), &mut sink)?;
        splice(
            &mut query_out,
            query.as_bytes(),
            &sink.into_found(),
            (Site::Query, percent_encoded_len),
            secrets,
            |out, _, secret| {
                percent_encode(out, secret);
                Ok(())
            },
        )?;
    }
    // The query was ASCII and the encoded secrets are ASCII.
    let query_text = std::str::from_utf8(&query_out).map_err(|_| InjectError::Uri)?;
    let scheme = target.scheme.as_str();
    // Sized up front, so that the text holding the secrets never moves.
    let mut url = Zeroizing::new(String::with_capacity(
        scheme.len() + 3 + authority.len() + target.path.len() + 1 + query_text.len(),
    ));
    url.push_str(scheme);
    url.push_str("://");
    url.push_str(&authority);
    url.push_str(&target.path);
    if target.query.is_some() {
        url.push('?');
        url.push_str(query_text);
    }
    Uri::try_from(url.as_str()).map_err(|_| InjectError::Uri)
}

/// The body with the placeholders at the places their aliases name (`places`, the same the
/// check scanned with) substituted: in a JSON body the raw placeholder, JSON-escaped; in a form
/// body the placeholder in any spelling, percent-encoded (so a secret holding `&`, `=`, `+`, `%`
/// or a space stays one field value); `body` itself when it holds none. Inert placeholders
/// elsewhere in the body are left as they are. `headers` are the request's (for `Content-Type`
/// and `Content-Encoding`: [`placeholder::body_kind`]), read before [`headers`] substitutes them.
pub fn body(
    headers: &HeaderMap,
    body: Bytes,
    places: &BodyPlaces,
    secrets: &Secrets,
) -> Result<Bytes, InjectError> {
    let mut sink = Sink::new(usize::MAX, &secrets.shaped);
    placeholder::scan_body(headers, &body, places, &mut sink)?;
    let found = sink.into_found();
    if found.is_empty() {
        return Ok(body);
    }
    let form = placeholder::body_kind(headers) == BodyKind::Form;
    let mut out = Vec::new();
    let encoded_len = if form {
        percent_encoded_len
    } else {
        json_escaped_len
    };
    splice(
        &mut out,
        &body,
        &found,
        (Site::Body, encoded_len),
        secrets,
        |out, _, secret| {
            if form {
                percent_encode(out, secret);
            } else {
                json_escape(out, secret);
            }
            Ok(())
        },
    )?;
    Ok(Bytes::from(out))
}

/// Writes `raw` to `out` with every found placeholder replaced through `write`, which writes
/// `encoded_len(secret)` bytes for a secret; fails on a placeholder outside `site`.
fn splice(
    out: &mut Vec<u8>,
    raw: &[u8],
    found: &[Found],
    (site, encoded_len): (Site, fn(&[u8]) -> usize),
    secrets: &Secrets,
    mut write: impl FnMut(&mut Vec<u8>, &str, &[u8]) -> Result<(), InjectError>,
) -> Result<(), InjectError> {
    // Check everything before writing anything, and make room for all of it: a buffer that grew
    // would free an unwiped copy of the secrets written so far.
    let mut room = raw.len();
    for one in found {
        if one.place != Place::Site(site) {
            return Err(forbidden(one.clone()));
        }
        let secret = secrets.for_site(&one.alias, site)?;
        room = room.saturating_add(encoded_len(secret));
    }
    reserve_wiped(out, room);
    let mut pos = 0;
    for one in found {
        let Range { start, end } = one.span.clone();
        out.extend_from_slice(raw.get(pos..start).unwrap_or_default());
        write(out, &one.alias, secrets.for_site(&one.alias, site)?)?;
        pos = end;
    }
    out.extend_from_slice(raw.get(pos..).unwrap_or_default());
    Ok(())
}

fn forbidden(found: Found) -> InjectError {
    match found.place {
        Place::Forbidden(place) => InjectError::Forbidden {
            alias: found.alias,
            part: found.part,
            place,
        },
        // A site where another was expected: the query scanner found a query placeholder where a
        // header was wanted, which cannot happen; refuse all the same.
        Place::Site(site) => InjectError::SiteNotAllowed {
            alias: found.alias,
            site,
        },
    }
}

/// Whether `byte` is RFC 3986 unreserved, written as it is by [`percent_encode`].
fn unreserved(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~')
}

/// The length of `secret` as [`percent_encode`] writes it.
fn percent_encoded_len(secret: &[u8]) -> usize {
    secret
        .iter()
        .map(|&byte| if unreserved(byte) { 1 } else { 3 })
        .sum()
}

/// The length of `secret` as [`json_escape`] writes it.
fn json_escaped_len(secret: &[u8]) -> usize {
    secret
        .iter()
        .map(|&byte| match byte {
            b'"' | b'\\' | 0x08 | 0x0c | b'\n' | b'\r' | b'\t' => 2,
            0x00..=0x1f => 6,
            _ => 1,
        })
        .sum()
}

/// Appends `secret` percent-encoded: every byte outside RFC 3986 unreserved as `%XX`.
fn percent_encode(out: &mut Vec<u8>, secret: &[u8]) {
    for &byte in secret {
        if unreserved(byte) {
            out.push(byte);
        } else {
            out.extend_from_slice(&[
                b'%',
                HEX_UPPER[usize::from(byte >> 4)],
                HEX_UPPER[usize::from(byte & 0xf)],
            ]);
        }
    }
}

/// Appends `secret` (UTF-8) as the content of a JSON string.
fn json_escape(out: &mut Vec<u8>, secret: &[u8]) {
    for &byte in secret {
        match byte {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x0c => out.extend_from_slice(b"\\f"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x00..=0x1f => out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX_LOWER[usize::from(byte >> 4)],
                HEX_LOWER[usize::from(byte & 0xf)],
            ]),
            _ => out.push(byte),
        }
    }
}

const HEX_UPPER: &[u8; 16] = b"0123456789ABCDEF";
const HEX_LOWER: &[u8; 16] = b"0123456789abcdef";

#[cfg(test)]
mod tests;
