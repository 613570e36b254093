//! Tells whether a proxied request is an MCP JSON-RPC `tools/call` (or a batch holding some) and
//! which tools it calls, so the policy's `tool` field can match them.
//!
//! Runs in the proxy on every request, before the policy is evaluated and before any placeholder is
//! substituted, on the body as received; the proxy then forwards exactly the bytes examined here. A
//! request whose calls cannot be named safely is refused: every [`McpCallError`] is a 400
//! `invalid_request`, a 413 `body_too_large` or a 415 `unsupported_content_encoding`
//! ([`McpCallError::code`]), never a forward. Pure: no
//! I/O, no secret; errors name a kind of problem and at most a byte offset, never text from the
//! body or the headers, because they reach the agent and the logs.
//!
//! # Threat model
//!
//! The agent chooses the method, every header and the body. An allow rule without `tool` lets
//! through anything that is not a `tools/call`, so a body this module reads as "no call" must be
//! one that no real MCP server reads as a call: not the official Python SDK (pydantic-core's JSON
//! parser, Content-Type checked only loosely), not the TypeScript SDK (any Content-Type containing
//! `application/json`, the body decoded with whatever `charset` it names, gzip inflated by
//! `express.json()`), not Go's `encoding/json` (member names matched case-insensitively,
//! `json.Decoder` reading the first of several values) and not lenient parsers (comments, `NaN`,
//! duplicate keys where the last one wins, UTF-16 detected from the bytes). Where a receiver could
//! read something this module cannot, the request is refused rather than passed as "no call".
//!
//! # When a body is examined
//!
//! 1. An empty body is no call, whatever else the request says.
//! 2. The method is not consulted: GET, PUT or any other method is examined like POST. Servers
//!    route by path, honour method-override headers, or read a body on any method; trusting the
//!    method would save nothing, as the checks below cost a few byte compares.
//! 3. The `Content-Type` media type is not consulted: servers accept `text/plain, application/json`
//!    (Python SDK), anything containing `application/json` (TypeScript SDK) or do not check.
//! 4. Every `charset` parameter in any `Content-Type` must name UTF-8 or an ASCII-compatible
//!    single-byte charset (`utf-8`, `us-ascii`, `iso-8859-N`, `windows-125N`, `koi8-r`/`-u`, and
//!    their spellings without punctuation), else [`McpCallError::UnsupportedCharset`]: receivers
//!    decode with the named charset (UTF-7, UTF-16, EBCDIC, even `base64` through iconv-lite), and
//!    those spell a JSON text with bytes that do not look like one. In the allowed charsets every
//!    byte below 0x80 means the same as in UTF-8, so a JSON text's structure reads the same.
//! 5. `Content-Encoding`: none or one `identity` examines the body as is; exactly one `gzip` or
//!    `x-gzip` examines the decoded body (members concatenated, at most
//!    [`MAX_DECODED_BODY_BYTES`], else [`McpCallError::DecodedBodyTooLarge`] whatever the
//!    decoded bytes start with); anything else — `deflate` (zlib or raw: receivers disagree),
//!    `br`, `zstd`, a list of codings (`identity, gzip` included) — is
//!    [`McpCallError::UnsupportedContentEncoding`], since this module cannot see inside and some
//!    servers decode it. A body this module cannot examine whole is never "no call".
//! 6. The text of the (decoded) body is JSON-like when its first significant character is `{` or
//!    `[`. Skipped before it, as lenient parsers skip them: one UTF-8 byte order mark, any Unicode
//!    whitespace (`char::is_whitespace`, U+FEFF), `/* … */`, `// …` and `# …` comments and the
//!    `)]}'` prefix. A body whose first bytes say UTF-16 or UTF-32 (a byte order mark, or a zero
//!    byte among the first two, as Python's `json` and Jackson detect it) is decoded that way for
//!    this test only; when it is JSON-like, it is [`McpCallError::NotUtf8`].
//! 7. A JSON-like body must be strict JSON (below), else [`McpCallError::Malformed`]. So what a
//!    lenient parser accepts and a strict one does not (comments, `NaN`, trailing commas, single
//!    quotes, lone surrogates) is refused: no server can read a call that this module has not
//!    named. The cost is that a JSON-like body that is not JSON is refused even on an API that is
//!    not MCP (an RTF upload starting `{\rtf`, an INI file starting `[`); a receiver that really
//!    wants such a body is rare, and the answer says `invalid_request`.
//!
//! Every other body — no JSON-like start — is no call: no JSON parser, however lenient, reads an
//! object or an array from it. The residual risk is a server that finds JSON-RPC in a body that
//! does not start like JSON (YAML, JSON inside multipart or a form field); no MCP transport does.
//!
//! # Strict JSON
//!
//! RFC 8259 without extensions: UTF-8; objects, arrays, strings, numbers, `true`, `false`, `null`;
//! only JSON whitespace between tokens; no raw control character in strings; only the escapes
//! `\" \\ \/ \b \f \n \r \t \uXXXX`, surrogates in pairs; numbers without leading zeros, `+` or
//! bare `.` (any magnitude); at most [`MAX_JSON_DEPTH`] levels of nesting, as serde_json. Duplicate
//! member names (after unescaping) are refused in every object ([`McpCallError::DuplicateKey`]):
//! receivers disagree on which one counts. An object of more than a few members is checked when
//! it closes (its names sorted, never copied), so its duplicate is reported even when a later
//! error in the same object would have come first. The body may hold several JSON texts one after another
//! (JSON Lines, or a stream that `json.Decoder` reads the first value of); each is examined as if
//! it were one more element of a batch. The byte order mark and the texts one after another are
//! the rule the placeholder scan reads a JSON body by too (`mint_policy::body::json_start`), so
//! the tool the policy matches and the places a secret may be substituted come from one view of
//! the body. Parsing is iterative and builds no document: only member
//! names and the few values read below are decoded.
//!
//! # What is a `tools/call`
//!
//! A message is a top-level object, or an object element of a top-level array (a batch). Other
//! batch elements (scalars, arrays) and an empty batch hold no call and are not an error: a server
//! answers them with a JSON-RPC error and runs nothing. Objects nested deeper are never messages.
//!
//! Member names of a message (and of its `params`) are compared the way the most lenient decoders
//! compare them: cut at the first U+0000 (C strings), then ASCII case-insensitively with `ſ`
//! (U+017F) as `s`, the Kelvin sign (U+212A) as `k` and `ı`, `İ` as `i` (Go's `encoding/json`
//! folding). Two members of one message that both read as `method` or as `params`, or two members
//! of `params` that both read as `name`, are [`McpCallError::AmbiguousMember`], even with different
//! spellings. `jsonrpc` and `id` are not looked at: a wrong or missing `jsonrpc` and a notification
//! (no `id`) do not hide a call.
//!
//! A message is a `tools/call` when its `method` is a string that reads as `tools/call` under the
//! same comparison (after JSON unescaping: `"tools\/call"`, `"\u0074ools/call"`). A method of
//! another type is no call. For a call, `params` must be an object whose `name` is a string that is
//! a valid [`ToolName`] (1–128 printable ASCII characters, no space) and holds no placeholder start
//! `{{mint:` (any case, raw or percent-encoded after JSON unescaping): a substituted secret must
//! never become a tool name. Anything else is [`McpCallError::InvalidToolCall`].
//!
//! # Size
//!
//! A body holding at least one call and longer than [`MAX_MCP_MESSAGE_BYTES`] (the decoded length
//! for gzip) is [`McpCallError::BodyTooLarge`]. Other JSON bodies of any size are examined (up to
//! the proxy's own body limit) and pass: large uploads that are not MCP calls keep working. A gzip
//! body that decodes past [`MAX_DECODED_BODY_BYTES`] is [`McpCallError::DecodedBodyTooLarge`],
//! whatever it holds: what lies past the limit is unseen, and a call may hide there behind any
//! amount of whitespace.
//!
//! # Cost
//!
//! No body: one length check. A body that is not JSON-like: two header lookups and a look at its
//! first characters. A JSON-like body: one UTF-8 check and one pass of the tokenizer, with member
//! names decoded one at a time (borrowed unless escaped), and per open object the positions of
//! its member names (4 bytes a member, for the duplicate check); no `serde_json::Value` is built.
//! So the memory beyond the body is about half the body at worst (an object of a million
//! three-letter names: 4 bytes for each 8 of text, up to twice that while the list grows).

use std::borrow::Cow;
use std::cmp::Ordering;
use std::fmt;
use std::io::Read;

use flate2::read::MultiGzDecoder;
use http::{HeaderMap, Method};
use mint_policy::audit::ToolName;
use mint_policy::body::{is_json_whitespace, json_start};

/// The largest body that may hold an MCP `tools/call` (DESIGN.md, limits: 1 MiB messages).
pub const MAX_MCP_MESSAGE_BYTES: usize = 1 << 20;

/// The most bytes a gzip body is decoded to (the proxy's request body limit, 10 MiB).
pub const MAX_DECODED_BODY_BYTES: usize = 10 << 20;

/// The deepest nesting of arrays and objects accepted: 127, as serde_json's default recursion
/// limit allows (and as the placeholder scan accepts).
pub const MAX_JSON_DEPTH: usize = 127;

/// The MCP tool calls a request holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ToolCalls {
    /// No `tools/call`: the body is empty or not JSON, or its JSON holds no `tools/call` message.
    #[default]
    None,
    /// The tool names, one per `tools/call` message in body order (repeats kept); never empty
    /// when returned by [`tool_calls`].
    Calls(Vec<ToolName>),
}

/// Why a request's tool calls could not be named. Carries a kind and a byte offset, never text.
///
/// Offsets count bytes from the start of the body as received, or of the decoded body for a
/// gzip body.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum McpCallError {
    /// A JSON-like body that is not strict JSON.
    #[error("the JSON body is malformed at byte {offset}: {reason}")]
    Malformed {
        /// Where the problem is.
        offset: usize,
        /// What is wrong.
        reason: SyntaxReason,
    },
    /// Arrays and objects nested deeper than the limit.
    #[error("the JSON body nests deeper than {limit} levels at byte {offset}")]
    TooDeep {
        /// The `{` or `[` one level too deep.
        offset: usize,
        /// The limit, [`MAX_JSON_DEPTH`].
        limit: usize,
    },
    /// An object with two members of the same name (after unescaping).
    #[error("duplicate member name in a JSON object at byte {offset}")]
    DuplicateKey {
        /// The second member's name.
        offset: usize,
    },
    /// Two members of a message (or of its `params`) that a lenient receiver reads as one.
    #[error("the JSON-RPC member `{member}` is spelled twice in one object at byte {offset}")]
    AmbiguousMember {
        /// The member.
        member: Member,
        /// The second spelling's name.
        offset: usize,
    },
    /// A `tools/call` whose tool cannot be named.
    #[error("MCP `tools/call` at byte {offset}: {problem}")]
    InvalidToolCall {
        /// The message's `{`, or the `name` string when the name is the problem.
        offset: usize,
        /// What is wrong.
        problem: CallProblem,
    },
    /// A JSON-like body encoded in UTF-16 or UTF-32.
    #[error("the JSON body is not UTF-8 (it reads as UTF-16 or UTF-32)")]
    NotUtf8,
    /// A `charset` other than UTF-8 or an ASCII-compatible single-byte charset.
    #[error("unsupported `charset` in the `Content-Type`: send JSON as UTF-8")]
    UnsupportedCharset,
    /// A `Content-Encoding` other than one `identity` or one `gzip`, or a list of codings.
    #[error("unsupported `Content-Encoding` on the request body: send one `gzip` or none")]
    UnsupportedContentEncoding,
    /// A `gzip` body that does not decode.
    #[error("the request body does not decode as `gzip`")]
    UndecodableBody,
    /// A body holding a `tools/call` and longer than [`MAX_MCP_MESSAGE_BYTES`].
    #[error("an MCP `tools/call` body of {len} bytes is over the {limit}-byte limit")]
    BodyTooLarge {
        /// The body's length (decoded, for gzip).
        len: usize,
        /// The limit, [`MAX_MCP_MESSAGE_BYTES`].
        limit: usize,
    },
    /// A gzip body that decodes past [`MAX_DECODED_BODY_BYTES`].
    #[error("the gzip body decodes past the {limit}-byte limit")]
    DecodedBodyTooLarge {
        /// The limit, [`MAX_DECODED_BODY_BYTES`].
        limit: usize,
    },
}

/// What makes a JSON-like body malformed.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SyntaxReason {
    /// A byte sequence that is not UTF-8.
    InvalidUtf8,
    /// The body ends inside a value.
    UnexpectedEnd,
    /// A byte that cannot start or continue a value here.
    UnexpectedByte,
    /// A raw control character (below U+0020) inside a string.
    ControlCharacter,
    /// A `\` escape that JSON does not define, or bad hex digits.
    InvalidEscape,
    /// A `\u` escape of one half of a surrogate pair without the other.
    LoneSurrogate,
    /// A number outside the JSON grammar.
    InvalidNumber,
}

/// A JSON-RPC member whose spelling is checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Member {
    /// A message's `method`.
    Method,
    /// A message's `params`.
    Params,
    /// The `name` in `params`.
    Name,
}

/// What is wrong with a `tools/call`.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CallProblem {
    /// No `params` member.
    MissingParams,
    /// `params` is not an object.
    ParamsNotObject,
    /// No `name` member in `params`.
    MissingName,
    /// `name` is not a string.
    NameNotString,
    /// `name` is not 1–128 printable ASCII characters without space.
    InvalidName,
    /// `name` holds a placeholder start `{{mint:`.
    PlaceholderInName,
}

// === impl ToolCalls ===

impl ToolCalls {
    /// The tool names in body order; empty for [`ToolCalls::None`].
    pub fn names(&self) -> &[ToolName] {
        match self {
            ToolCalls::None => &[],
            ToolCalls::Calls(names) => names,
        }
    }

    /// Whether the request holds at least one `tools/call`.
    pub fn is_tool_call(&self) -> bool {
        !self.names().is_empty()
    }

    fn from_names(names: Vec<ToolName>) -> ToolCalls {
        if names.is_empty() {
            ToolCalls::None
        } else {
            ToolCalls::Calls(names)
        }
    }
}

// === impl McpCallError ===

impl McpCallError {
    /// The stable error code for the client: `invalid_request` (400), `body_too_large` (413) or
    /// `unsupported_content_encoding` (415).
    pub fn code(&self) -> &'static str {
        match self {
            McpCallError::Malformed { .. }
            | McpCallError::TooDeep { .. }
            | McpCallError::DuplicateKey { .. }
            | McpCallError::AmbiguousMember { .. }
            | McpCallError::InvalidToolCall { .. }
            | McpCallError::NotUtf8
            | McpCallError::UnsupportedCharset
            | McpCallError::UndecodableBody => "invalid_request",
            McpCallError::UnsupportedContentEncoding => "unsupported_content_encoding",
            McpCallError::BodyTooLarge { .. } | McpCallError::DecodedBodyTooLarge { .. } => {
                "body_too_large"
            }
        }
    }
}

impl fmt::Display for SyntaxReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SyntaxReason::InvalidUtf8 => "invalid UTF-8",
            SyntaxReason::UnexpectedEnd => "unexpected end of the body",
            SyntaxReason::UnexpectedByte => "unexpected character",
            SyntaxReason::ControlCharacter => "raw control character in a string",
            SyntaxReason::InvalidEscape => "invalid escape in a string",
            SyntaxReason::LoneSurrogate => "unpaired surrogate escape in a string",
            SyntaxReason::InvalidNumber => "invalid number",
        })
    }
}

impl fmt::Display for Member {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Member::Method => "method",
            Member::Params => "params",
            Member::Name => "params.name",
        })
    }
}

impl fmt::Display for CallProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CallProblem::MissingParams => "`params` is missing",
            CallProblem::ParamsNotObject => "`params` must be an object",
            CallProblem::MissingName => "`params.name` is missing",
            CallProblem::NameNotString => "`params.name` must be a string",
            CallProblem::InvalidName => {
                "`params.name` must be 1 to 128 printable ASCII characters without space"
            }
            CallProblem::PlaceholderInName => "`params.name` must not hold a placeholder",
        })
    }
}

/// The MCP tool calls of a request, read from its headers and body as received (see the module
/// documentation for exactly what is examined). `method` is not consulted: every method's body is
/// examined.
pub fn tool_calls(
    method: &Method,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<ToolCalls, McpCallError> {
    // Deliberately unused (module docs, "When a body is examined", 2.).
    let _ = method;
    examine(&decoded_body(headers, body)?)
}

/// The body as a receiver reads it: checked for its `charset` and decoded from its content
/// coding (steps 4 and 5 of the module documentation). A body this module cannot see whole is
/// an error, never passed on partly or undecoded: an unknown coding or a list of codings is
/// [`McpCallError::UnsupportedContentEncoding`], and a gzip body that inflates past
/// [`MAX_DECODED_BODY_BYTES`] is [`McpCallError::DecodedBodyTooLarge`] whatever its first bytes
/// say (a call may follow any amount of padding). Borrowed unless it was decoded.
pub fn decoded_body<'a>(
    headers: &HeaderMap,
    body: &'a [u8],
) -> Result<Cow<'a, [u8]>, McpCallError> {
    if body.is_empty() {
        return Ok(Cow::Borrowed(body));
    }
    check_charsets(headers)?;
    match content_coding(headers)? {
        Coding::Identity => Ok(Cow::Borrowed(body)),
        Coding::Gzip => {
            let decoded = gunzip(body)?;
            if decoded.len() > MAX_DECODED_BODY_BYTES {
                return Err(McpCallError::DecodedBodyTooLarge {
                    limit: MAX_DECODED_BODY_BYTES,
                });
            }
            Ok(Cow::Owned(decoded))
        }
    }
}

/// The tool calls of a body already decoded from its content coding ([`decoded_body`]).
pub fn examine(body: &[u8]) -> Result<ToolCalls, McpCallError> {
    match shape(body) {
        Shape::NotJson => Ok(ToolCalls::None),
        Shape::Wide => Err(McpCallError::NotUtf8),
        Shape::Json => {
            let names = Parser::new(body)?.run()?;
            if !names.is_empty() && body.len() > MAX_MCP_MESSAGE_BYTES {
                return Err(McpCallError::BodyTooLarge {
                    len: body.len(),
                    limit: MAX_MCP_MESSAGE_BYTES,
                });
            }
            Ok(ToolCalls::from_names(names))
        }
    }
}

// === Headers ===

/// The content codings this module can see through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Coding {
    Identity,
    Gzip,
}

/// The body's content coding: every `Content-Encoding` header, as one comma-separated list.
/// Exactly one coding is accepted (empty items aside): a list, even `identity, gzip`, is refused,
/// since receivers disagree on whether and in which order they undo each item.
fn content_coding(headers: &HeaderMap) -> Result<Coding, McpCallError> {
    let mut coding = Coding::Identity;
    let mut count = 0usize;
    for value in headers.get_all(http::header::CONTENT_ENCODING) {
        for token in value.as_bytes().split(|&b| b == b',') {
            let token = token.trim_ascii();
            if token.is_empty() {
                continue;
            }
            count += 1;
            if token.eq_ignore_ascii_case(b"identity") {
                coding = Coding::Identity;
            } else if token.eq_ignore_ascii_case(b"gzip") || token.eq_ignore_ascii_case(b"x-gzip") {
                coding = Coding::Gzip;
            } else {
                return Err(McpCallError::UnsupportedContentEncoding);
            }
        }
    }
    if count > 1 {
        return Err(McpCallError::UnsupportedContentEncoding);
    }
    Ok(coding)
}

/// Refuses any `charset` parameter, in any `Content-Type` header, outside the allowed ones.
///
/// Every `charset` followed by `=` counts, wherever it sits (even inside another parameter's
/// quoted value): a receiver's parser may read the header differently, so over-matching is the
/// safe side.
fn check_charsets(headers: &HeaderMap) -> Result<(), McpCallError> {
    for value in headers.get_all(http::header::CONTENT_TYPE) {
        let bytes = value.as_bytes();
        let mut from = 0;
        while let Some(found) = find_ignore_case(bytes, from, b"charset") {
            let mut pos = found + b"charset".len();
            from = pos;
            pos = skip_ascii_whitespace(bytes, pos);
            if bytes.get(pos) != Some(&b'=') {
                continue;
            }
            pos = skip_ascii_whitespace(bytes, pos + 1);
            if bytes.get(pos) == Some(&b'"') {
                pos += 1;
            }
            let end = bytes
                .get(pos..)
                .unwrap_or_default()
                .iter()
                .position(|&b| matches!(b, b'"' | b';' | b',' | b' ' | b'\t'))
                .map_or(bytes.len(), |len| pos + len);
            if !is_allowed_charset(bytes.get(pos..end).unwrap_or_default()) {
                return Err(McpCallError::UnsupportedCharset);
            }
        }
    }
    Ok(())
}

/// Whether a charset name means UTF-8 or an ASCII-compatible single-byte charset. Compared like
/// iconv-lite compares names: lowercase, letters and digits only.
fn is_allowed_charset(name: &[u8]) -> bool {
    let normal: Vec<u8> = name
        .iter()
        .filter(|b| b.is_ascii_alphanumeric())
        .map(u8::to_ascii_lowercase)
        .collect();
    let normal = normal.as_slice();
    if matches!(
        normal,
        b"utf8" | b"usascii" | b"ascii" | b"latin1" | b"koi8r" | b"koi8u"
    ) {
        return true;
    }
    // ISO-8859-1 to -16 (there is no -12) and windows-1250 to -1258 (also `cp125N`).
    if let Some(part) = normal.strip_prefix(b"iso8859") {
        return std::str::from_utf8(part)
            .ok()
            .filter(|digits| !digits.starts_with('0'))
            .and_then(|digits| digits.parse::<u8>().ok())
            .is_some_and(|n| (1..=16).contains(&n) && n != 12);
    }
    let windows = normal
        .strip_prefix(b"windows")
        .or_else(|| normal.strip_prefix(b"cp"));
    matches!(
        windows,
        Some(
            b"1250" | b"1251" | b"1252" | b"1253" | b"1254" | b"1255" | b"1256" | b"1257" | b"1258"
        )
    )
}

fn find_ignore_case(haystack: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    let rest = haystack.get(from..)?;
    rest.windows(needle.len())
        .position(|window| window.eq_ignore_ascii_case(needle))
        .map(|at| from + at)
}

fn skip_ascii_whitespace(bytes: &[u8], mut pos: usize) -> usize {
    while matches!(bytes.get(pos), Some(b' ' | b'\t')) {
        pos += 1;
    }
    pos
}

/// Decodes a gzip body (concatenated members, as Go and Node decode them), keeping at most one
/// byte past [`MAX_DECODED_BODY_BYTES`] so the caller sees that it is too long. The buffer grows
/// by doubling but never past that, so a bomb costs at most the limit (plus one byte).
fn gunzip(body: &[u8]) -> Result<Vec<u8>, McpCallError> {
    let cap = MAX_DECODED_BODY_BYTES.saturating_add(1);
    let mut decoder = MultiGzDecoder::new(body);
    let mut decoded: Vec<u8> = Vec::new();
    let mut chunk = [0u8; 16 << 10];
    while decoded.len() < cap {
        let read = match decoder.read(&mut chunk) {
            Ok(0) => break,
            Ok(read) => read,
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return Err(McpCallError::UndecodableBody),
        };
        let take = read.min(cap - decoded.len());
        if decoded.capacity() - decoded.len() < take {
            let want = decoded
                .capacity()
                .saturating_mul(2)
                .max(64 << 10)
                .min(cap)
                .max(decoded.len() + take);
            decoded.reserve_exact(want - decoded.len());
        }
        decoded.extend_from_slice(chunk.get(..take).unwrap_or_default());
    }
    Ok(decoded)
}

// === Body shape ===

/// What the first significant character of a body says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    /// Not `{` or `[`: no JSON parser reads an object or an array from it.
    NotJson,
    /// UTF-8 (or undeclared) text starting like JSON.
    Json,
    /// UTF-16 or UTF-32 text starting like JSON.
    Wide,
}

/// A UTF-16 or UTF-32 byte order, as detected from the first bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Wide {
    Utf16Le,
    Utf16Be,
    Utf32Le,
    Utf32Be,
}

fn shape(body: &[u8]) -> Shape {
    if let Some((wide, bom)) = wide_encoding(body) {
        let unit = match wide {
            Wide::Utf16Le | Wide::Utf16Be => 2,
            Wide::Utf32Le | Wide::Utf32Be => 4,
        };
        let chars = body
            .get(bom..)
            .unwrap_or_default()
            .chunks_exact(unit)
            .map(|chunk| wide_char(chunk, wide));
        return if starts_like_json(chars) {
            Shape::Wide
        } else {
            Shape::NotJson
        };
    }
    // Valid UTF-8 up to the first invalid sequence, which ends the scan.
    let chars = body.utf8_chunks().flat_map(|chunk| {
        let stop = (!chunk.invalid().is_empty()).then_some(None);
        chunk.valid().chars().map(Some).chain(stop)
    });
    if starts_like_json(chars) {
        Shape::Json
    } else {
        Shape::NotJson
    }
}

/// Python's `json.detect_encoding` (a superset of Jackson's): a UTF-32 or UTF-16 byte order
/// mark, or a zero byte first (big-endian) or second (little-endian). Returns the order and the
/// length of the mark.
fn wide_encoding(body: &[u8]) -> Option<(Wide, usize)> {
    match body {
        [0, 0, 0xFE, 0xFF, ..] => Some((Wide::Utf32Be, 4)),
        [0xFF, 0xFE, 0, 0, ..] => Some((Wide::Utf32Le, 4)),
        [0xFE, 0xFF, ..] => Some((Wide::Utf16Be, 2)),
        [0xFF, 0xFE, ..] => Some((Wide::Utf16Le, 2)),
        [0, 0, ..] => Some((Wide::Utf32Be, 0)),
        [0, _, ..] => Some((Wide::Utf16Be, 0)),
        [_, 0, 0, 0, ..] => Some((Wide::Utf32Le, 0)),
        [_, 0, ..] => Some((Wide::Utf16Le, 0)),
        _ => None,
    }
}

/// One code unit as a character; `None` for a surrogate or a value past U+10FFFF. Surrogate
/// pairs are not joined: no character that may precede a JSON text lies outside the BMP.
fn wide_char(chunk: &[u8], wide: Wide) -> Option<char> {
    let code = match (wide, chunk) {
        (Wide::Utf16Le, &[a, b]) => u32::from(u16::from_le_bytes([a, b])),
        (Wide::Utf16Be, &[a, b]) => u32::from(u16::from_be_bytes([a, b])),
        (Wide::Utf32Le, &[a, b, c, d]) => u32::from_le_bytes([a, b, c, d]),
        (Wide::Utf32Be, &[a, b, c, d]) => u32::from_be_bytes([a, b, c, d]),
        _ => return None,
    };
    char::from_u32(code)
}

/// Whether the first significant character is `{` or `[`, skipping what lenient JSON parsers
/// skip before a value. `None` (an undecodable unit) ends the scan.
fn starts_like_json(chars: impl Iterator<Item = Option<char>>) -> bool {
    #[derive(Clone, Copy)]
    enum State {
        Between,
        Slash,
        Block,
        BlockStar,
        Line,
        /// Inside the `)]}'` prefix, after this many characters of it.
        Prefix(usize),
    }
    let mut state = State::Between;
    for c in chars {
        let Some(c) = c else {
            return false;
        };
        state = match (state, c) {
            (State::Between, '{' | '[') => return true,
            (State::Between, '/') => State::Slash,
            (State::Between, '#') => State::Line,
            (State::Between, ')') => State::Prefix(1),
            (State::Between, c) if c.is_whitespace() || c == '\u{feff}' => State::Between,
            (State::Slash, '*') => State::Block,
            (State::Slash, '/') => State::Line,
            (State::Block | State::BlockStar, '*') => State::BlockStar,
            (State::BlockStar, '/') => State::Between,
            (State::Block | State::BlockStar, _) => State::Block,
            // A line comment ends at the first character any parser takes as a line end.
            (State::Line, '\n' | '\r' | '\u{2028}' | '\u{2029}') => State::Between,
            (State::Line, _) => State::Line,
            (State::Prefix(1), ']') => State::Prefix(2),
            (State::Prefix(2), '}') => State::Prefix(3),
            (State::Prefix(3), '\'') => State::Between,
            (State::Between | State::Slash | State::Prefix(_), _) => return false,
        };
    }
    false
}

// === Strict JSON ===

/// What the value about to be parsed is to the JSON-RPC reading.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    /// A top-level value: an object is a message, an array a batch.
    Top,
    /// An element of a batch: an object is a message.
    Element,
    /// A message's `method`.
    Method,
    /// A message's `params`.
    Params,
    /// The `name` in a message's `params`.
    Name,
    /// Anything else.
    Plain,
}

/// What an open object is to the JSON-RPC reading.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ObjectKind {
    Message,
    Params,
    Plain,
}

/// An open container.
enum Frame {
    Object {
        kind: ObjectKind,
        /// Where the member names seen so far start (their opening quotes, tagged with
        /// [`ESCAPED`] when they hold an escape): 4 bytes a member
        /// whatever its length, never a copy of a name. Duplicates among the first
        /// [`INLINE_NAMES`] are found as they come; in a larger object, when it closes.
        names: Vec<u32>,
    },
    Array {
        batch: bool,
    },
}

/// What is known about the open message. Messages never nest, so there is at most one.
struct Message<'a> {
    /// The offset of its `{`.
    start: usize,
    /// `None` without a `method` member; else whether it reads as `tools/call`.
    method: Option<bool>,
    /// `None` without a `params` member.
    params: Option<Params<'a>>,
}

enum Params<'a> {
    NotObject,
    /// An object, with its `name` member if it has one.
    Object(Option<Name<'a>>),
}

enum Name<'a> {
    NotString,
    Text { text: Cow<'a, str>, offset: usize },
}

/// A string token: the offsets of its opening quote and of its content, and whether the content
/// holds an escape.
#[derive(Clone, Copy)]
struct StringToken {
    open: usize,
    start: usize,
    end: usize,
    escaped: bool,
}

/// A strict JSON parser that reads only what the JSON-RPC reading needs. Iterative: the nesting
/// lives in `stack`, never on the call stack.
struct Parser<'a> {
    text: &'a str,
    pos: usize,
    stack: Vec<Frame>,
    message: Option<Message<'a>>,
    calls: Vec<ToolName>,
}

impl<'a> Parser<'a> {
    fn new(body: &'a [u8]) -> Result<Parser<'a>, McpCallError> {
        let text = std::str::from_utf8(body).map_err(|error| McpCallError::Malformed {
            offset: error.valid_up_to(),
            reason: SyntaxReason::InvalidUtf8,
        })?;
        // One byte order mark is skipped, as Python and Node skip it: the rule the placeholder
        // scan follows too (`json_start`).
        let pos = json_start(body);
        Ok(Parser {
            text,
            pos,
            stack: Vec::new(),
            message: None,
            calls: Vec::new(),
        })
    }

    /// Parses every JSON text of the body and returns the tool names.
    fn run(mut self) -> Result<Vec<ToolName>, McpCallError> {
        loop {
            self.whitespace();
            if self.pos >= self.text.len() {
                return Ok(self.calls);
            }
            self.value(Role::Top)?;
        }
    }

    /// One whole value, containers included.
    fn value(&mut self, role: Role) -> Result<(), McpCallError> {
        let mut role = role;
        'value: loop {
            match self.peek() {
                Some(b'{') => {
                    self.check_depth()?;
                    let kind = match role {
                        Role::Top | Role::Element => {
                            self.message = Some(Message {
                                start: self.pos,
                                method: None,
                                params: None,
                            });
                            ObjectKind::Message
                        }
                        Role::Params => {
                            if let Some(message) = self.message.as_mut() {
                                message.params = Some(Params::Object(None));
                            }
                            ObjectKind::Params
                        }
                        Role::Method | Role::Name | Role::Plain => ObjectKind::Plain,
                    };
                    self.stack.push(Frame::Object {
                        kind,
                        names: Vec::new(),
                    });
                    self.pos += 1;
                    self.whitespace();
                    if self.peek() == Some(b'}') {
                        self.pos += 1;
                        self.close_object()?;
                    } else {
                        role = self.member_name()?;
                        continue 'value;
                    }
                }
                Some(b'[') => {
                    self.check_depth()?;
                    let batch = role == Role::Top;
                    self.stack.push(Frame::Array { batch });
                    self.pos += 1;
                    self.whitespace();
                    if self.peek() == Some(b']') {
                        self.pos += 1;
                        self.stack.pop();
                    } else {
                        role = element_role(batch);
                        continue 'value;
                    }
                }
                Some(b'"') => {
                    let token = self.string()?;
                    match role {
                        Role::Method => {
                            let method = self.decode(token)?;
                            if let Some(message) = self.message.as_mut() {
                                message.method = Some(reads_as(&method, "tools/call"));
                            }
                        }
                        Role::Name => {
                            let text = self.decode(token)?;
                            if let Some(Message {
                                params: Some(Params::Object(name)),
                                ..
                            }) = self.message.as_mut()
                            {
                                *name = Some(Name::Text {
                                    text,
                                    offset: token.open,
                                });
                            }
                        }
                        Role::Top | Role::Element | Role::Params | Role::Plain => {}
                    }
                }
                Some(b't') => self.literal(b"true", role)?,
                Some(b'f') => self.literal(b"false", role)?,
                Some(b'n') => self.literal(b"null", role)?,
                Some(b'-' | b'0'..=b'9') => {
                    self.number()?;
                    self.end_of_top_scalar(role)?;
                }
                Some(_) => return Err(self.malformed(self.pos, SyntaxReason::UnexpectedByte)),
                None => return Err(self.malformed(self.pos, SyntaxReason::UnexpectedEnd)),
            }
            // A value ended: close containers until one continues with `,`.
            loop {
                self.whitespace();
                let in_object = match self.stack.last() {
                    None => return Ok(()),
                    Some(Frame::Object { .. }) => true,
                    Some(Frame::Array { .. }) => false,
                };
                match (self.peek(), in_object) {
                    (Some(b','), true) => {
                        self.pos += 1;
                        self.whitespace();
                        role = self.member_name()?;
                        continue 'value;
                    }
                    (Some(b','), false) => {
                        self.pos += 1;
                        self.whitespace();
                        let batch = matches!(self.stack.last(), Some(Frame::Array { batch: true }));
                        role = element_role(batch);
                        continue 'value;
                    }
                    (Some(b'}'), true) => {
                        self.pos += 1;
                        self.close_object()?;
                    }
                    (Some(b']'), false) => {
                        self.pos += 1;
                        self.stack.pop();
                    }
                    (Some(_), _) => {
                        return Err(self.malformed(self.pos, SyntaxReason::UnexpectedByte));
                    }
                    (None, _) => return Err(self.malformed(self.pos, SyntaxReason::UnexpectedEnd)),
                }
            }
        }
    }

    fn check_depth(&self) -> Result<(), McpCallError> {
        if self.stack.len() >= MAX_JSON_DEPTH {
            return Err(McpCallError::TooDeep {
                offset: self.pos,
                limit: MAX_JSON_DEPTH,
            });
        }
        Ok(())
    }

    /// `"name"`, whitespace, `:`, whitespace; returns the role of the member's value.
    fn member_name(&mut self) -> Result<Role, McpCallError> {
        match self.peek() {
            Some(b'"') => {}
            Some(_) => return Err(self.malformed(self.pos, SyntaxReason::UnexpectedByte)),
            None => return Err(self.malformed(self.pos, SyntaxReason::UnexpectedEnd)),
        }
        let token = self.string()?;
        let name = self.decode(token)?;
        self.whitespace();
        match self.peek() {
            Some(b':') => self.pos += 1,
            Some(_) => return Err(self.malformed(self.pos, SyntaxReason::UnexpectedByte)),
            None => return Err(self.malformed(self.pos, SyntaxReason::UnexpectedEnd)),
        }
        self.whitespace();
        let Some(Frame::Object { kind, names }) = self.stack.last() else {
            // INVARIANT: member names are only read right after `{` or an object's `,`.
            return Err(self.malformed(token.open, SyntaxReason::UnexpectedByte));
        };
        let member = match kind {
            ObjectKind::Message if reads_as(&name, "method") => Some(Member::Method),
            ObjectKind::Message if reads_as(&name, "params") => Some(Member::Params),
            ObjectKind::Params if reads_as(&name, "name") => Some(Member::Name),
            ObjectKind::Message | ObjectKind::Params | ObjectKind::Plain => None,
        };
        let open = match u32::try_from(token.open) {
            Ok(open) if open & ESCAPED == 0 => open | if token.escaped { ESCAPED } else { 0 },
            // Bodies are far below 2 GiB (the proxy's body limit); fail closed past that.
            _ => return Err(self.malformed(token.open, SyntaxReason::UnexpectedByte)),
        };
        if names.len() < INLINE_NAMES && names.iter().any(|&other| self.same_name(other, open)) {
            return Err(McpCallError::DuplicateKey { offset: token.open });
        }
        if let Some(Frame::Object { names, .. }) = self.stack.last_mut() {
            names.push(open);
        }
        let Some(member) = member else {
            return Ok(Role::Plain);
        };
        let ambiguous = McpCallError::AmbiguousMember {
            member,
            offset: token.open,
        };
        // A member first counts as present with a value of the wrong type; `value` records the
        // right type when it sees one.
        match (member, self.message.as_mut()) {
            (Member::Method, Some(message)) => {
                if message.method.replace(false).is_some() {
                    return Err(ambiguous);
                }
                Ok(Role::Method)
            }
            (Member::Params, Some(message)) => {
                if message.params.replace(Params::NotObject).is_some() {
                    return Err(ambiguous);
                }
                Ok(Role::Params)
            }
            (
                Member::Name,
                Some(Message {
                    params: Some(Params::Object(name)),
                    ..
                }),
            ) => {
                if name.replace(Name::NotString).is_some() {
                    return Err(ambiguous);
                }
                Ok(Role::Name)
            }
            // INVARIANT: message and params objects are only opened with `self.message` set.
            _ => Ok(Role::Plain),
        }
    }

    /// Pops the object just closed; a message yields its tool call, if it is one.
    fn close_object(&mut self) -> Result<(), McpCallError> {
        let kind = match self.stack.pop() {
            Some(Frame::Object { kind, names }) => {
                if names.len() > INLINE_NAMES {
                    self.check_duplicates(names)?;
                }
                kind
            }
            Some(Frame::Array { .. }) | None => return Ok(()),
        };
        if kind != ObjectKind::Message {
            return Ok(());
        }
        let Some(message) = self.message.take() else {
            return Ok(());
        };
        if message.method != Some(true) {
            return Ok(());
        }
        let problem = |problem| McpCallError::InvalidToolCall {
            offset: message.start,
            problem,
        };
        let (text, offset) = match message.params {
            None => return Err(problem(CallProblem::MissingParams)),
            Some(Params::NotObject) => return Err(problem(CallProblem::ParamsNotObject)),
            Some(Params::Object(None)) => return Err(problem(CallProblem::MissingName)),
            Some(Params::Object(Some(Name::NotString))) => {
                return Err(problem(CallProblem::NameNotString));
            }
            Some(Params::Object(Some(Name::Text { text, offset }))) => (text, offset),
        };
        let invalid = |problem| McpCallError::InvalidToolCall { offset, problem };
        if holds_placeholder_start(&text) {
            return Err(invalid(CallProblem::PlaceholderInName));
        }
        let name = ToolName::new(text).map_err(|_| invalid(CallProblem::InvalidName))?;
        self.calls.push(name);
        Ok(())
    }

    /// Whether the checked string tokens at `a` and `b` (positions tagged with [`ESCAPED`])
    /// hold the same name once unescaped.
    fn same_name(&self, a: u32, b: u32) -> bool {
        self.compare_names(a, b) == Ordering::Equal
    }

    /// Orders two names by their unescaped characters: the bytes themselves when neither has an
    /// escape (UTF-8 orders as its characters do), else character by character.
    fn compare_names(&self, a: u32, b: u32) -> Ordering {
        match (self.raw_name(a), self.raw_name(b)) {
            (Some(a), Some(b)) => a.cmp(b),
            _ => self.name_chars(a).cmp(self.name_chars(b)),
        }
    }

    /// The bytes of a name without escapes (its closing quote is the first quote after it).
    fn raw_name(&self, tagged: u32) -> Option<&'a [u8]> {
        if tagged & ESCAPED != 0 {
            return None;
        }
        let start = tagged as usize + 1;
        let rest = self.text.as_bytes().get(start..)?;
        // Names are short: a plain scan beats setting up `memchr` for each comparison.
        rest.get(..rest.iter().position(|&b| b == b'"')?)
    }

    /// Refuses an object whose member names (their opening quotes, `names`) hold a duplicate,
    /// at the second occurrence that comes first in the body, as [`Parser::member_name`] would
    /// have found it: sorted by name, then by position, without copying a name.
    fn check_duplicates(&self, mut names: Vec<u32>) -> Result<(), McpCallError> {
        names.sort_unstable_by(|&a, &b| match self.compare_names(a, b) {
            Ordering::Equal => (a & !ESCAPED).cmp(&(b & !ESCAPED)),
            other => other,
        });
        let second = names
            .windows(2)
            .filter_map(|pair| match pair {
                &[a, b] if self.same_name(a, b) => Some(b & !ESCAPED),
                _ => None,
            })
            .min();
        match second {
            Some(offset) => Err(McpCallError::DuplicateKey {
                offset: offset as usize,
            }),
            None => Ok(()),
        }
    }

    /// The characters of the checked string token whose opening quote is at `open`, unescaped,
    /// one at a time.
    fn name_chars(&self, tagged: u32) -> NameChars<'a> {
        NameChars {
            text: self.text,
            pos: (tagged & !ESCAPED) as usize + 1,
        }
    }

    /// A string token starting at its opening quote; the position ends after the closing quote.
    fn string(&mut self) -> Result<StringToken, McpCallError> {
        let open = self.pos;
        let bytes = self.text.as_bytes();
        let start = open + 1;
        let mut pos = start;
        let mut escaped = false;
        loop {
            match bytes.get(pos) {
                Some(b'"') => break,
                Some(b'\\') => {
                    escaped = true;
                    pos = self.escape(pos)?;
                }
                Some(0x00..=0x1f) => {
                    return Err(self.malformed(pos, SyntaxReason::ControlCharacter));
                }
                Some(_) => pos += 1,
                None => return Err(self.malformed(pos, SyntaxReason::UnexpectedEnd)),
            }
        }
        self.pos = pos + 1;
        Ok(StringToken {
            open,
            start,
            end: pos,
            escaped,
        })
    }

    /// Checks the escape whose `\` is at `at`; returns the position after it.
    fn escape(&self, at: usize) -> Result<usize, McpCallError> {
        let bytes = self.text.as_bytes();
        match bytes.get(at + 1) {
            Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => Ok(at + 2),
            Some(b'u') => {
                let code = hex4(bytes, at + 2)
                    .ok_or_else(|| self.malformed(at, SyntaxReason::InvalidEscape))?;
                if (0xDC00..0xE000).contains(&code) {
                    return Err(self.malformed(at, SyntaxReason::LoneSurrogate));
                }
                if !(0xD800..0xDC00).contains(&code) {
                    return Ok(at + 6);
                }
                // A high surrogate must be followed by a low one.
                let low = (bytes.get(at + 6..at + 8) == Some(b"\\u"))
                    .then(|| hex4(bytes, at + 8))
                    .flatten()
                    .filter(|low| (0xDC00..0xE000).contains(low));
                match low {
                    Some(_) => Ok(at + 12),
                    None => Err(self.malformed(at, SyntaxReason::LoneSurrogate)),
                }
            }
            Some(_) => Err(self.malformed(at, SyntaxReason::InvalidEscape)),
            None => Err(self.malformed(at + 1, SyntaxReason::UnexpectedEnd)),
        }
    }

    /// The content of a checked string token, unescaped; borrowed when it has no escape.
    fn decode(&self, token: StringToken) -> Result<Cow<'a, str>, McpCallError> {
        // The token was checked by `string`, so every failure below is unreachable; each still
        // fails closed as a malformed body.
        let fail = || self.malformed(token.open, SyntaxReason::InvalidEscape);
        let raw = self.text.get(token.start..token.end).ok_or_else(fail)?;
        if !token.escaped {
            return Ok(Cow::Borrowed(raw));
        }
        let bytes = raw.as_bytes();
        let mut out = String::with_capacity(raw.len());
        let mut run = 0;
        let mut pos = 0;
        while let Some(&byte) = bytes.get(pos) {
            if byte != b'\\' {
                pos += 1;
                continue;
            }
            out.push_str(raw.get(run..pos).ok_or_else(fail)?);
            let (c, len) = match bytes.get(pos + 1) {
                Some(b'"') => ('"', 2),
                Some(b'\\') => ('\\', 2),
                Some(b'/') => ('/', 2),
                Some(b'b') => ('\u{8}', 2),
                Some(b'f') => ('\u{c}', 2),
                Some(b'n') => ('\n', 2),
                Some(b'r') => ('\r', 2),
                Some(b't') => ('\t', 2),
                Some(b'u') => {
                    let high = hex4(bytes, pos + 2).ok_or_else(fail)?;
                    if (0xD800..0xDC00).contains(&high) {
                        let low = hex4(bytes, pos + 8).ok_or_else(fail)?;
                        let code = 0x10000 + ((high - 0xD800) << 10) + (low.wrapping_sub(0xDC00));
                        (char::from_u32(code).ok_or_else(fail)?, 12)
                    } else {
                        (char::from_u32(high).ok_or_else(fail)?, 6)
                    }
                }
                _ => return Err(fail()),
            };
            out.push(c);
            pos += len;
            run = pos;
        }
        out.push_str(raw.get(run..).ok_or_else(fail)?);
        Ok(Cow::Owned(out))
    }

    fn number(&mut self) -> Result<(), McpCallError> {
        let start = self.pos;
        let invalid = |parser: &Self| parser.malformed(start, SyntaxReason::InvalidNumber);
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        match self.peek() {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => self.digits(),
            _ => return Err(invalid(self)),
        }
        if self.peek() == Some(b'.') {
            self.pos += 1;
            if !self.peek().is_some_and(|b| b.is_ascii_digit()) {
                return Err(invalid(self));
            }
            self.digits();
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.pos += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.pos += 1;
            }
            if !self.peek().is_some_and(|b| b.is_ascii_digit()) {
                return Err(invalid(self));
            }
            self.digits();
        }
        Ok(())
    }

    fn digits(&mut self) {
        while self.peek().is_some_and(|b| b.is_ascii_digit()) {
            self.pos += 1;
        }
    }

    fn literal(&mut self, word: &[u8], role: Role) -> Result<(), McpCallError> {
        let end = self.pos + word.len();
        if self.text.as_bytes().get(self.pos..end) != Some(word) {
            return Err(self.malformed(self.pos, SyntaxReason::UnexpectedByte));
        }
        self.pos = end;
        self.end_of_top_scalar(role)
    }

    /// A top-level number or literal must be followed by whitespace or the end: `01` or
    /// `truenull` is not two values.
    fn end_of_top_scalar(&self, role: Role) -> Result<(), McpCallError> {
        if role == Role::Top && self.peek().is_some_and(|b| !is_json_whitespace(b)) {
            return Err(self.malformed(self.pos, SyntaxReason::UnexpectedByte));
        }
        Ok(())
    }

    fn whitespace(&mut self) {
        while self.peek().is_some_and(is_json_whitespace) {
            self.pos += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.pos).copied()
    }

    fn malformed(&self, offset: usize, reason: SyntaxReason) -> McpCallError {
        McpCallError::Malformed { offset, reason }
    }
}

/// The bit of a recorded name position that says the name holds an escape.
const ESCAPED: u32 = 1 << 31;

/// How many member names of an object are checked for duplicates as they come; a larger
/// object's names are checked all together when it closes (sorted, without copies).
const INLINE_NAMES: usize = 16;

/// The unescaped characters of a string token already checked by [`Parser::string`], read
/// lazily from the body. Ends at the closing quote (and, unreachably, at anything malformed).
struct NameChars<'a> {
    text: &'a str,
    pos: usize,
}

impl Iterator for NameChars<'_> {
    type Item = char;

    fn next(&mut self) -> Option<char> {
        let bytes = self.text.as_bytes();
        let (c, len) = match *bytes.get(self.pos)? {
            b'"' => return None,
            b'\\' => match *bytes.get(self.pos + 1)? {
                b'"' => ('"', 2),
                b'\\' => ('\\', 2),
                b'/' => ('/', 2),
                b'b' => ('\u{8}', 2),
                b'f' => ('\u{c}', 2),
                b'n' => ('\n', 2),
                b'r' => ('\r', 2),
                b't' => ('\t', 2),
                b'u' => {
                    let high = hex4(bytes, self.pos + 2)?;
                    if (0xD800..0xDC00).contains(&high) {
                        let low = hex4(bytes, self.pos + 8)?;
                        let code = 0x10000 + ((high - 0xD800) << 10) + low.wrapping_sub(0xDC00);
                        (char::from_u32(code)?, 12)
                    } else {
                        (char::from_u32(high)?, 6)
                    }
                }
                _ => return None,
            },
            _ => {
                let c = self.text.get(self.pos..)?.chars().next()?;
                (c, c.len_utf8())
            }
        };
        self.pos += len;
        Some(c)
    }
}

/// The role of the next element of an array.
fn element_role(batch: bool) -> Role {
    if batch { Role::Element } else { Role::Plain }
}

/// Four hex digits at `at`, any case.
fn hex4(bytes: &[u8], at: usize) -> Option<u32> {
    bytes
        .get(at..at.checked_add(4)?)?
        .iter()
        .try_fold(0u32, |acc, &digit| {
            Some((acc << 4) | char::from(digit).to_digit(16)?)
        })
}

/// Whether `text` reads as `target` (lowercase ASCII) to the most lenient receiver: cut at the
/// first U+0000, then compared ASCII case-insensitively with `ſ` as `s`, the Kelvin sign as `k`,
/// and `ı`, `İ` as `i` (what Go's `encoding/json` folding adds to ASCII).
pub(crate) fn reads_as(text: &str, target: &str) -> bool {
    let text = text.split('\0').next().unwrap_or_default();
    let mut expected = target.chars();
    for c in text.chars() {
        let folded = match c {
            // Long s, Kelvin sign, dotless i, dotted capital I.
            '\u{17f}' => 's',
            '\u{212a}' => 'k',
            '\u{131}' | '\u{130}' => 'i',
            c => c.to_ascii_lowercase(),
        };
        if expected.next() != Some(folded) {
            return false;
        }
    }
    expected.next().is_none()
}

/// Whether a tool name holds `{{mint:` in any case, as written or once percent-decoded (the
/// placeholder scan reads JSON strings percent-decoded).
fn holds_placeholder_start(name: &str) -> bool {
    let contains = |bytes: &[u8]| {
        bytes
            .windows(PLACEHOLDER_START.len())
            .any(|window| window.eq_ignore_ascii_case(PLACEHOLDER_START))
    };
    contains(name.as_bytes()) || contains(&percent_decode(name.as_bytes()))
}

/// `%XX` escapes (any hex case) decoded once; a `%` without two hex digits stays itself.
fn percent_decode(raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len());
    let mut pos = 0;
    while let Some(&byte) = raw.get(pos) {
        let escape = (byte == b'%')
            .then(|| {
                let high = char::from(*raw.get(pos + 1)?).to_digit(16)?;
                let low = char::from(*raw.get(pos + 2)?).to_digit(16)?;
                u8::try_from((high << 4) | low).ok()
            })
            .flatten();
        match escape {
            Some(decoded) => {
                out.push(decoded);
                pos += 3;
            }
            None => {
                out.push(byte);
                pos += 1;
            }
        }
    }
    out
}

/// What opens a placeholder.
const PLACEHOLDER_START: &[u8] = b"{{mint:";

#[cfg(test)]
mod tests;
