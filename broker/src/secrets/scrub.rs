//! Redacts brokered secrets from upstream answers, streaming: every form of every secret that was
//! substituted into the request becomes [`REDACTED`] in the answer's headers and body.
//!
//! Built once per request (by `inject.rs`, the only module that reads secret values) from the
//! secrets it substituted; the proxy runs the answer's headers through
//! [`Scrubber::scrub_headers`] and every body chunk through [`Scrubber::push`], then
//! [`Scrubber::finish`]. It never decides access and never logs: neither the secrets nor the
//! patterns derived from them appear in any `Debug` output or error.
//!
//! # Forms
//!
//! For each secret (its UTF-8 bytes): raw; hex (lower and upper case); percent-encoded as
//! RFC 3986 (every byte outside unreserved, upper- and lowercase hex), as Python's `quote` (keeps
//! `/`), as `encodeURIComponent`, and as form encoders write it (space as `+`: Go's `QueryEscape`,
//! Python's `quote_plus`, `URLSearchParams`); JSON-escaped as serde_json and `JSON.stringify`
//! write it, with `\/` (PHP), with `\u003c`-style HTML escapes (Go), with `\uXXXX` for
//! everything outside ASCII (Python) and with every character as `\uXXXX` (lower- or uppercase
//! hex); base64, standard and URL-safe alphabets, padded or not, at all three alignments, and
//! standard base64 with `/` written `\/`; standard base64 line-wrapped at 76 (MIME) or 64 (PEM)
//! characters with CRLF, LF, or either JSON-escaped, a break anywhere inside the stable string and
//! every line length after it; HTML as Go's `html/template`, Python's `html.escape` (with and
//! without `quote`) and `escape-html` write it, with every non-alphanumeric character or every
//! character as a numeric reference (decimal, hex either case, `&#X`), and standard base64 with
//! `+` (and `/`) as references; quoted-printable (RFC 2045, and every non-alphanumeric byte as
//! `=XX`) with no soft line break or one (`=\r\n`, `=\n`) between any two units, for forms
//! that fit two lines. Not covered: other combinations of encodings (hex of base64,
//! percent-encoded base64, wrapped URL-safe or `\/`-escaped base64, HTML references inside
//! wrapped base64, JSON-escaped percent forms with lowercase hex, .NET's escaping of `+`),
//! quoted-printable that needs two soft breaks, compressed answers (the proxy asks for
//! `identity` and must decode or refuse anything else), and a secret split by the upstream itself
//! or transformed otherwise.
//!
//! # Guarantees
//!
//! All patterns are matched leftmost-longest and non-overlapping, exactly as one pass over the
//! whole answer would, whatever the chunking:
//!
//! - Every byte of the output that does not belong to a marker comes from a stretch of the answer
//!   in which no pattern occurs. So no pattern occurs in the output except, possibly, one that
//!   overlaps a marker (a secret such as `]abc` can reappear as the marker's last byte followed by
//!   `abc` that really followed the secret in the answer; no secret byte leaks that way). Text
//!   without any pattern passes through byte for byte.
//! - Base64: a pattern is the stable inner string of the encoding (see `scrub/patterns.rs`). At
//!   each end of an encoded secret, unless the secret starts or ends on a quantum boundary, one
//!   character mixes secret bits with the neighbours' bits; when that character is there (a
//!   base64 character, `/` written `\/`, `+` or `/` as an HTML reference, or a base64 character
//!   or `\/` on the other side of one line break), it is redacted with the match (and the break
//!   between), unless another match starts at that very character (which then redacts it). So
//!   no base64 character carrying a secret bit survives (the property tests check exactly this
//!   edge at every offset); at worst one character of innocent data beside a match goes with it,
//!   and the `=` padding stays.
//! - Chunks: what the agent gets never depends on whether held bytes match (part of) a pattern.
//!   [`Scrubber::push`] decides every match that starts before the last `hold` bytes plus
//!   `EXTENSION_MAX`; with `hold` = 2 × the longest pattern + 2 ×
//!   `EXTENSION_MAX`, rounded up to a multiple of 64, such a match, its neighbours
//!   and any match starting among them are wholly in sight, so the decision is final. It emits up
//!   to `hold` bytes before the end (or up to the end of a match that ends later), whatever the
//!   bytes: after a stretch without a match exactly `hold` bytes are kept. The output of a push
//!   is at most two slices between markers, split where the carry ends and the chunk begins (one
//!   for a chunk shorter than the hold, which is appended to the carry first); the
//!   carry's length depends only on `hold`, on where the newline rule last cut and on where the
//!   last match ended (which the marker shows). The hold tells an observer the longest pattern's
//!   length to within 32 bytes (the longest is usually every character as `\uXXXX` or `&#NNN;`:
//!   6 bytes a character), nothing more.
//! - Promptness, the newline rule: when the held bytes contain an LF whose line ends (before its
//!   `\n` or `\r\n`) with a byte that is neither a base64 character nor `=`, everything up to
//!   that LF is decided as at the end of the answer and emitted. No match can span that LF: no
//!   pattern holds a raw LF except those of a secret that holds one, wrapped base64 (whose breaks
//!   follow a base64 character) and quoted-printable soft breaks (which follow `=`), and the
//!   base64 neighbours taken across a break are base64 characters. So a server-sent event
//!   (`data: {...}\n\n`, `data: [DONE]\n\n`) and an NDJSON line (`{...}\n`) go out when
//!   they end. The rule depends on the bytes only; it is off when some loaded secret holds a CR
//!   or LF, which is all it reveals (such answers then wait for `hold` more bytes or the end).
//!   [`Scrubber::finish`] flushes the rest.
//!
//! Limits: base64 patterns need 4 stable characters, so a secret shorter than 4 bytes is not
//! matched as base64 at every alignment; a secret that is a substring of the marker keeps
//! appearing in it; a complete guess is still redacted, so an agent that can have a guess
//! reflected learns whether it was the whole secret (harmless for secrets of real length); an
//! upstream that knows the secret can always leak it in some form not covered here (scrubbing
//! catches reflection, it does not contain a hostile upstream: binding aliases to hosts does).
//! Buffers that held secret-derived bytes (patterns, the carry, the seam, the prefix hashes) are
//! wiped when dropped, and grow through `secrets::reserve_wiped`, which wipes the allocation
//! they leave; the matcher's tables of windows, hashes and fingerprints are not.
//!
//! # CPU time and speed
//!
//! The matcher (`scrub/engine.rs`) does the same work for every window of the answer whatever
//! its bytes, until a complete match: it samples one window every 4–32 bytes and evaluates, for
//! each, as many candidate starts as the fullest slot of its table lists, each by a hash over
//! the whole candidate length. So how much of a secret's form the answer holds does not change
//! the time a push takes (the tests count the work; the first design's prefilter did change it,
//! and an outside review recovered secrets from that). The price is speed: roughly 80 to 200
//! MiB/s instead of gigabytes (docs/performance.md). Output that needs no redaction is handed
//! on as slices of the input [`Bytes`], without copying, apart from the carry.
//!
//! A push's cost grows with its own length, not with the hold (issue 21): a chunk shorter than
//! the hold is appended to the carry, whose prefix hashes and newline scan carry over from the
//! pushes before, and the matcher samples only the windows of starts that became decidable (the
//! new bytes plus a constant). So a stream of one-byte chunks or tiny WebSocket frames costs
//! about what the same bytes cost in one push, and what is emitted, and when, is exactly what
//! the rescanning design emitted (a property test holds the two equal push by push). A secret of `n`
//! bytes has up to 1,680 wrapped forms (140 break positions, 4 spellings, 3 alignments; fewer
//! under 57 bytes), about 800 patterns in all for a 40-byte secret and 1,700 for 200 bytes;
//! building their tables takes a few milliseconds.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue};
use zeroize::Zeroizing;

mod engine;
mod patterns;

use super::{extend_wiped, reserve_wiped};
use engine::{Engine, Hay};
use patterns::{EXTENSION_MAX, LINE_BREAKS, Pattern, is_base64_byte};

/// What every form of a secret is replaced with.
pub const REDACTED: &str = "[mint:redacted]";

/// Streaming redaction for one answer. Cheap to build for a few secrets; build one per request.
pub struct Scrubber {
    engine: Option<Arc<Engine>>,
    /// Every pattern that can occur in a header name, lowercased: names arrive lowercased, so a
    /// secret reflected into a name must be found whatever its case.
    names: Option<Arc<Engine>>,
    /// Answer bytes received but not yet emitted (they may hold the start of a secret) are
    /// `held[head..]`, the carry. A push shorter than the hold is appended here and the bytes
    /// before `head` were emitted already: they go when the buffer is compacted, so a small push
    /// neither moves what stays held nor hashes it again.
    held: Zeroizing<Vec<u8>>,
    head: usize,
    /// The prefix hashes of `held` under the engine's hash base when there is one more of them
    /// than bytes in `held` (small pushes keep them so); stale otherwise.
    hashes: Zeroizing<Vec<u64>>,
    /// No LF in `held[head + 2..checked]` is a cut of the newline rule (whether one is depends
    /// only on the bytes up to it, apart from the first two of the carry, which depend on
    /// `before`): a push looks only at the bytes after it.
    checked: usize,
    scratch: Scratch,
    /// The byte of the answer just before the carry, as the newline rule sees it.
    before: u8,
}

/// What one [`Scrubber::push`] or [`Scrubber::finish`] emits: pieces to send in order, most of them
/// slices of the pushed chunk.
#[derive(Default)]
pub struct Scrubbed {
    pieces: Vec<Bytes>,
}

/// The scrubber could not be built.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the secrets' patterns are too large to compile")]
pub struct ScrubError;

/// A plain Aho-Corasick scan over the same patterns as a [`Scrubber`], for the benchmark's
/// comparison.
#[doc(hidden)]
pub struct Baseline {
    automaton: aho_corasick::AhoCorasick,
}

// === impl Scrubber ===

impl Scrubber {
    /// A scrubber for no secret: passes everything through.
    pub fn empty() -> Scrubber {
        Scrubber {
            engine: None,
            names: None,
            held: Zeroizing::new(Vec::new()),
            head: 0,
            hashes: Zeroizing::new(Vec::new()),
            checked: 0,
            scratch: Scratch::default(),
            before: NOTHING_BEFORE,
        }
    }

    /// A scrubber for `secrets`, given as their bytes. Only `inject.rs` calls it (it alone reads
    /// secret values); empty secrets are ignored.
    pub(crate) fn from_secrets<'a>(
        secrets: impl IntoIterator<Item = &'a [u8]>,
    ) -> Result<Scrubber, ScrubError> {
        let (patterns, count, flushes) = all_patterns(secrets);
        // A header name holds only token characters (RFC 9110): a pattern with any other byte
        // (a line break, a backslash, `;`, `=`, `/`...) cannot occur in one, and leaving those out
        // keeps this second engine small.
        let mut in_names: Vec<Pattern> = patterns
            .iter()
            .filter(|p| p.bytes.iter().all(|&b| is_token_byte(b)))
            .map(|p| Pattern {
                bytes: Zeroizing::new(p.bytes.to_ascii_lowercase()),
                kind: p.kind,
            })
            .collect();
        patterns::dedup(&mut in_names);
        let engine = Engine::new(patterns, count, flushes).map_err(|_| ScrubError)?;
        let names = Engine::new(in_names, count, flushes).map_err(|_| ScrubError)?;
        Ok(Scrubber {
            engine: engine.map(Arc::new),
            names: names.map(Arc::new),
            ..Scrubber::empty()
        })
    }

    /// A scrubber for another answer with the same secrets: shares the compiled patterns, so a
    /// caller may keep one per set of aliases and skip the build (tens of microseconds per secret).
    pub fn fresh(&self) -> Scrubber {
        Scrubber {
            engine: self.engine.clone(),
            names: self.names.clone(),
            ..Scrubber::empty()
        }
    }

    /// Whether it redacts nothing (no secret).
    pub fn is_empty(&self) -> bool {
        self.engine.is_none()
    }

    /// Scrubs from now on with `newer`'s patterns (the secrets after a reload, which keep every
    /// secret ever loaded, so they are a superset of this scrubber's), keeping the bytes held
    /// back so far: they are scanned again, with the new patterns, with the next chunk.
    pub fn adopt(&mut self, newer: Scrubber) {
        self.engine = newer.engine;
        self.names = newer.names;
        // Another hash base, and maybe another hold and newline rule: nothing known carries over.
        self.hashes.clear();
        self.checked = self.head;
    }

    /// How many bytes are held back, waiting for the next chunk.
    pub fn pending(&self) -> usize {
        self.held.len() - self.head
    }

    /// Takes the next chunk of the answer's body and returns what can be sent now: pieces
    /// between markers, split only where the carry ends and the chunk begins, and for a chunk
    /// shorter than the hold not even there (see the module docs for why no boundary depends on
    /// a secret).
    pub fn push(&mut self, chunk: Bytes) -> Scrubbed {
        let Some(engine) = self.engine.clone() else {
            return Scrubbed::one(chunk);
        };
        let mut out = Scrubbed::default();
        if chunk.len() < engine.hold() {
            self.push_small(&engine, &chunk, |live, piece| {
                out.take(live, &Bytes::new(), piece);
            });
            return out;
        }
        let held = std::mem::take(&mut self.held);
        let carry = &held[self.head.min(held.len())..];
        let done = step(
            &engine,
            carry,
            &mut self.scratch,
            &chunk,
            self.before,
            self.checked.saturating_sub(self.head),
            |piece| out.take(carry, &chunk, piece),
        );
        self.keep(held, &chunk, done);
        out
    }

    /// Takes the answer's last chunk and ends the answer, in one pass: the same bytes as
    /// [`Self::push`] followed by [`Self::finish`], in fewer pieces (nothing is held back, so
    /// the carry and the chunk are decided as at the end, and the chunk is searched once). For
    /// a body whose end is known with its last bytes (a `Content-Length` answer). The scrubber
    /// can then start a new answer.
    pub fn push_last(&mut self, chunk: Bytes) -> Scrubbed {
        let Some(engine) = self.engine.clone() else {
            return Scrubbed::one(chunk);
        };
        let mut held = std::mem::take(&mut self.held);
        let carry = &held[self.head.min(held.len())..];
        let mut out = Scrubbed::default();
        run(&engine, carry, &mut self.scratch, &chunk, true, |piece| {
            out.take(carry, &chunk, piece);
        });
        held.clear();
        self.held = held;
        self.head = 0;
        self.checked = 0;
        self.hashes.clear();
        self.before = NOTHING_BEFORE;
        out
    }

    /// [`Self::push`] for a borrowed chunk: the same, copied into one buffer.
    pub fn push_slice(&mut self, chunk: &[u8]) -> Vec<u8> {
        let Some(engine) = self.engine.clone() else {
            return chunk.to_vec();
        };
        if chunk.len() < engine.hold() {
            let mut out = Vec::new();
            self.push_small(&engine, chunk, |live, piece| {
                emit_into(&mut out, live, &[], piece);
            });
            return out;
        }
        self.push_carried(&engine, chunk)
    }

    /// The way every push went before issue 21, for the tests' comparison: the carry scanned
    /// again, by the newline rule and the matcher, with the chunk.
    #[cfg(test)]
    fn push_rescanning(&mut self, chunk: &[u8]) -> Vec<u8> {
        let Some(engine) = self.engine.clone() else {
            return chunk.to_vec();
        };
        self.checked = self.head;
        self.push_carried(&engine, chunk)
    }

    /// [`Self::push_slice`] of a chunk searched beside the carry rather than appended to it.
    fn push_carried(&mut self, engine: &Engine, chunk: &[u8]) -> Vec<u8> {
        let held = std::mem::take(&mut self.held);
        let carry = &held[self.head.min(held.len())..];
        let mut out = Vec::with_capacity(carry.len() + chunk.len());
        let done = step(
            engine,
            carry,
            &mut self.scratch,
            chunk,
            self.before,
            self.checked.saturating_sub(self.head),
            |piece| {
                emit_into(&mut out, carry, chunk, piece);
            },
        );
        self.keep(held, chunk, done);
        out
    }

    /// A push shorter than the hold: appended to the held bytes, whose prefix hashes and
    /// newline scan are carried over, so its cost grows with its own length and not with the
    /// hold (a stream of one-byte chunks or tiny WebSocket frames). It decides exactly what the
    /// carry followed by the chunk decides in [`Self::push`] (the same [`run`] over the same
    /// bytes), and emits the same bytes at the same push; `emit` gets the carry (the chunk
    /// included) and a piece in its coordinates.
    fn push_small(&mut self, engine: &Engine, chunk: &[u8], mut emit: impl FnMut(&[u8], Piece)) {
        if self.hashes.len() != self.held.len() + 1 {
            self.compact();
            self.hashes.clear();
            engine.extend_prefix(&self.held, &mut self.hashes);
        }
        extend_wiped(&mut self.held, chunk);
        engine.extend_prefix(&self.held, &mut self.hashes);
        let head = self.head.min(self.held.len());
        let live = &self.held[head..];
        let prefix = &self.hashes[head..];
        let known = self.checked.saturating_sub(head);
        let (len, is_end) = match flush_point(engine, live, &[], self.before, known) {
            Some(at) => (at, true),
            None => (live.len(), false),
        };
        // INVARIANT: the cut is within the carry, and the prefix hashes cover it.
        let view = View::whole(
            engine,
            &live[..len],
            Hay::new(&live[..len], &prefix[..=len]),
        );
        let done = decide(&view, is_end, |piece| emit(live, piece));
        self.checked = self.held.len();
        self.head = head + done.cut;
        if let Some(before) = done.before {
            self.before = before;
        }
        // The emitted bytes go once they outweigh what is held: each byte is moved (and its
        // hash computed again) a bounded number of times on average.
        if self.head >= COMPACT_MIN && self.head >= self.held.len() - self.head {
            self.compact();
        }
    }

    /// Drops the emitted bytes before the carry; the prefix hashes go stale.
    fn compact(&mut self) {
        if self.head == 0 {
            return;
        }
        let head = self.head.min(self.held.len());
        self.held.drain(..head);
        self.head = 0;
        self.checked = self.checked.saturating_sub(head);
        self.hashes.clear();
    }

    /// Keeps what `done` left of the carry (`held[head..]`) followed by `chunk` for the next
    /// push. Every LF kept was looked at by the newline rule.
    fn keep(&mut self, mut held: Zeroizing<Vec<u8>>, chunk: &[u8], done: Done) {
        let head = self.head.min(held.len());
        let c = held.len() - head;
        if done.cut >= c {
            held.clear();
            extend_wiped(&mut held, &chunk[done.cut - c..]);
        } else {
            held.drain(..head + done.cut);
            extend_wiped(&mut held, chunk);
        }
        self.held = held;
        self.head = 0;
        self.checked = self.held.len();
        self.hashes.clear();
        if let Some(before) = done.before {
            self.before = before;
        }
    }

    /// Ends the answer: returns everything still held back, redacted. The scrubber can then
    /// start a new answer.
    pub fn finish(&mut self) -> Scrubbed {
        Scrubbed::one(Bytes::from(self.finish_vec()))
    }

    /// [`Self::finish`] into one buffer.
    pub fn finish_vec(&mut self) -> Vec<u8> {
        let held = std::mem::take(&mut self.held);
        let carry = &held[self.head.min(held.len())..];
        self.head = 0;
        self.checked = 0;
        self.hashes.clear();
        self.before = NOTHING_BEFORE;
        let Some(engine) = self.engine.clone() else {
            return carry.to_vec();
        };
        let mut out = Vec::with_capacity(carry.len());
        run(&engine, carry, &mut self.scratch, &[], true, |piece| {
            emit_into(&mut out, carry, &[], piece);
        });
        out
    }

    /// Redacts one complete value (a header, a reason phrase): borrowed back when nothing
    /// matched. Independent of the streaming state.
    pub fn scrub<'a>(&self, value: &'a [u8]) -> Cow<'a, [u8]> {
        let Some(engine) = &self.engine else {
            return Cow::Borrowed(value);
        };
        // Shorter than every pattern (most header values): nothing to find.
        if value.len() < engine.min_len() {
            return Cow::Borrowed(value);
        }
        // A first pass only asks whether anything matches: almost every value (headers above
        // all) is clean. Only a value that holds a secret is run again to collect its pieces.
        let mut scratch = Scratch::default();
        let mut dirty = false;
        run(engine, &[], &mut scratch, value, true, |piece| {
            dirty |= piece == Piece::Marker;
        });
        if !dirty {
            return Cow::Borrowed(value);
        }
        let mut pieces = Vec::new();
        run(engine, &[], &mut scratch, value, true, |piece| {
            pieces.push(piece)
        });
        let mut out = Vec::with_capacity(value.len());
        for piece in pieces {
            emit_into(&mut out, &[], value, piece);
        }
        Cow::Owned(out)
    }

    /// Redacts every header value (`Location` and `Set-Cookie` included) and drops every header
    /// whose name holds a secret in any letter case (names arrive lowercased).
    pub fn scrub_headers(&self, headers: &mut HeaderMap) {
        if self.engine.is_none() {
            return;
        }
        let mut doomed = Vec::new();
        for (name, value) in headers.iter_mut() {
            let name_holds_secret = self
                .names
                .as_ref()
                .is_some_and(|names| names.is_match(name.as_str().to_ascii_lowercase().as_bytes()));
            if name_holds_secret || matches!(self.scrub(name.as_str().as_bytes()), Cow::Owned(_)) {
                doomed.push(name.clone());
                continue;
            }
            if let Cow::Owned(redacted) = self.scrub(value.as_bytes()) {
                // The bytes kept were valid header bytes and the marker is plain ASCII.
                *value = HeaderValue::from_bytes(&redacted)
                    .unwrap_or_else(|_| HeaderValue::from_static(REDACTED));
            }
        }
        for name in doomed {
            headers.remove(&name);
        }
    }
}

impl fmt::Debug for Scrubber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scrubber")
            .field("engine", &self.engine)
            .field("pending", &self.pending())
            .finish_non_exhaustive()
    }
}

// === impl Scrubbed ===

impl Scrubbed {
    /// Appends `piece`, in the coordinates of `carry` followed by `chunk`: the carry's bytes
    /// copied, the chunk's as slices of it.
    ///
    /// INVARIANT: `run` only emits ranges within `carry.len() + chunk.len()`, in order.
    fn take(&mut self, carry: &[u8], chunk: &Bytes, piece: Piece) {
        match piece {
            Piece::Raw(start, end) => {
                let c = carry.len();
                if start < c {
                    self.pieces
                        .push(Bytes::copy_from_slice(&carry[start..end.min(c)]));
                }
                if end > c {
                    self.pieces.push(chunk.slice(start.max(c) - c..end - c));
                }
            }
            Piece::Marker => self.pieces.push(Bytes::from_static(REDACTED.as_bytes())),
        }
    }

    fn one(bytes: Bytes) -> Scrubbed {
        let pieces = if bytes.is_empty() {
            Vec::new()
        } else {
            vec![bytes]
        };
        Scrubbed { pieces }
    }

    /// The number of bytes.
    pub fn len(&self) -> usize {
        self.pieces.iter().map(Bytes::len).sum()
    }

    /// Whether there is nothing to send.
    pub fn is_empty(&self) -> bool {
        self.pieces.iter().all(Bytes::is_empty)
    }

    /// The pieces, in order.
    pub fn pieces(&self) -> &[Bytes] {
        &self.pieces
    }

    /// The pieces, in order, by value.
    pub fn into_pieces(self) -> Vec<Bytes> {
        self.pieces
    }

    /// All pieces as one buffer; copies only when there are several.
    pub fn into_bytes(self) -> Bytes {
        match <[Bytes; 1]>::try_from(self.pieces) {
            Ok([one]) => one,
            Err(pieces) => Bytes::from(pieces.concat()),
        }
    }
}

impl IntoIterator for Scrubbed {
    type Item = Bytes;
    type IntoIter = std::vec::IntoIter<Bytes>;

    fn into_iter(self) -> Self::IntoIter {
        self.pieces.into_iter()
    }
}

impl fmt::Debug for Scrubbed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scrubbed")
            .field("pieces", &self.pieces.len())
            .field("len", &self.len())
            .finish()
    }
}

// === impl Baseline ===

impl Baseline {
    /// The plain automaton over the patterns of `secrets`. Only `inject.rs` calls it.
    pub(crate) fn from_secrets<'a>(
        secrets: impl IntoIterator<Item = &'a [u8]>,
    ) -> Result<Baseline, ScrubError> {
        let (patterns, _, _) = all_patterns(secrets);
        let automaton = aho_corasick::AhoCorasick::builder()
            .match_kind(aho_corasick::MatchKind::LeftmostLongest)
            .kind(Some(aho_corasick::AhoCorasickKind::DFA))
            .build(patterns.iter().map(|p| &p.bytes[..]))
            .map_err(|_| ScrubError)?;
        Ok(Baseline { automaton })
    }

    /// Counts the matches of one `find_iter` pass over `hay`.
    pub fn count(&self, hay: &[u8]) -> usize {
        self.automaton.find_iter(hay).count()
    }
}

impl fmt::Debug for Baseline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Baseline").finish_non_exhaustive()
    }
}

/// One piece of output, in the coordinates of the carry followed by the chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Piece {
    Raw(usize, usize),
    Marker,
}

/// Buffers a [`run`] reuses: the seam and the prefix hashes of the seam and of the chunk. All
/// derived from answer bytes, so wiped when dropped.
#[derive(Default)]
struct Scratch {
    seam: Zeroizing<Vec<u8>>,
    seam_hashes: Zeroizing<Vec<u64>>,
    chunk_hashes: Zeroizing<Vec<u64>>,
}

/// The carry followed by the chunk, read as one buffer `B` of `n` bytes.
struct View<'a> {
    engine: &'a Engine,
    carry: &'a [u8],
    chunk: &'a [u8],
    /// The carry followed by at least the first `max_len` bytes of the chunk (all of it if
    /// shorter), so every match that starts in the carry fits.
    seam: Hay<'a>,
    /// The chunk, ready to be searched.
    chunk_hay: Hay<'a>,
    n: usize,
}

impl<'a> View<'a> {
    /// `bytes` alone, as a carry followed by nothing, searched through `hay` (their prefix
    /// hashes, computed already).
    fn whole(engine: &'a Engine, bytes: &'a [u8], hay: Hay<'a>) -> View<'a> {
        View {
            engine,
            carry: bytes,
            chunk: &[],
            seam: hay,
            chunk_hay: Hay::new(&[], &[0]),
            n: bytes.len(),
        }
    }

    /// The byte at `at`; 0 (a byte no extension takes) past the end.
    fn byte(&self, at: usize) -> u8 {
        let c = self.carry.len();
        if at < c {
            self.carry.get(at).copied().unwrap_or(0)
        } else {
            self.chunk.get(at - c).copied().unwrap_or(0)
        }
    }

    /// Whether the bytes from `at` are `expected` (all of them in sight).
    fn has(&self, at: usize, expected: &[u8]) -> bool {
        at + expected.len() <= self.n
            && expected
                .iter()
                .enumerate()
                .all(|(i, &byte)| self.byte(at + i) == byte)
    }

    /// The leftmost-longest match starting in `pos..max_start`.
    fn find(&self, pos: usize, max_start: usize) -> Option<engine::Found> {
        let c = self.carry.len();
        if pos < c {
            if let Some(found) = self.engine.find(&self.seam, pos, c.min(max_start)) {
                return Some(found);
            }
            return self.shifted(0, max_start);
        }
        self.shifted(pos - c, max_start)
    }

    fn shifted(&self, from: usize, max_start: usize) -> Option<engine::Found> {
        let c = self.carry.len();
        if max_start <= c {
            return None;
        }
        self.engine
            .find(&self.chunk_hay, from, max_start - c)
            .map(|found| engine::Found {
                start: found.start + c,
                end: found.end + c,
                kind: found.kind,
            })
    }

    /// The length of the base64 character ending at `at` and not starting before `floor`: a
    /// base64 byte, `/` written `\/`, or, unless `plain`, `+` or `/` written as an HTML numeric
    /// character reference. 0 when there is none.
    fn unit_before(&self, at: usize, floor: usize, plain: bool) -> usize {
        if at <= floor {
            return 0;
        }
        let last = self.byte(at - 1);
        if is_base64_byte(last) {
            return if last == b'/' && at - 1 > floor && self.byte(at - 2) == b'\\' {
                2
            } else {
                1
            };
        }
        if plain || last != b';' {
            return 0;
        }
        (5..=6)
            .find(|&len| at >= floor + len && is_reference_unit(|i| self.byte(at - len + i), len))
            .unwrap_or(0)
    }

    /// The length of the base64 character starting at `at` (as in [`Self::unit_before`]).
    fn unit_at(&self, at: usize, plain: bool) -> usize {
        let first = self.byte(at);
        if at < self.n && is_base64_byte(first) {
            return 1;
        }
        if self.has(at, b"\\/") {
            return 2;
        }
        if plain || first != b'&' {
            return 0;
        }
        (5..=6)
            .find(|&len| at + len <= self.n && is_reference_unit(|i| self.byte(at + i), len))
            .unwrap_or(0)
    }

    /// How many bytes before `at` (and not before `floor`) a base64 match starting at `at` takes
    /// with it: the neighbouring character, also across one line break (then written plainly
    /// or as `\/`).
    fn back_extension(&self, at: usize, floor: usize) -> usize {
        for spelling in LINE_BREAKS {
            let len = spelling.len();
            if at >= floor + len && self.has(at - len, spelling) {
                let unit = self.unit_before(at - len, floor, true);
                if unit > 0 {
                    return len + unit;
                }
            }
        }
        self.unit_before(at, floor, false)
    }

    /// How many bytes from `at` a base64 match ending at `at` takes with it: the neighbouring
    /// character, also across one line break. Only what is in sight counts: `run` makes sure
    /// that, before the end, all [`EXTENSION_MAX`] bytes are.
    fn forward_extension(&self, at: usize) -> usize {
        for spelling in LINE_BREAKS {
            if self.has(at, spelling) {
                let unit = self.unit_at(at + spelling.len(), true);
                if unit > 0 {
                    return spelling.len() + unit;
                }
            }
        }
        self.unit_at(at, false)
    }
}

/// Whether the `len` bytes given by `byte` are `+` or `/` as an HTML numeric character
/// reference: `&#43;`, `&#47;`, `&#x2b;`, `&#x2f;` in any letter case.
fn is_reference_unit(byte: impl Fn(usize) -> u8, len: usize) -> bool {
    let lower = |i: usize| byte(i).to_ascii_lowercase();
    match len {
        5 => {
            byte(0) == b'&'
                && byte(1) == b'#'
                && byte(2) == b'4'
                && matches!(byte(3), b'3' | b'7')
                && byte(4) == b';'
        }
        6 => {
            byte(0) == b'&'
                && byte(1) == b'#'
                && lower(2) == b'x'
                && byte(3) == b'2'
                && matches!(lower(4), b'b' | b'f')
                && byte(5) == b';'
        }
        _ => false,
    }
}

/// What a [`run`] did: how many bytes of the carry followed by the chunk are done (the rest is
/// the next carry), and the byte just before that cut as the next run must see it.
struct Done {
    cut: usize,
    /// `None` when nothing is done (the byte before the carry stays what it was).
    before: Option<u8>,
}

/// Emitted bytes kept before the carry until there are at least this many (and as many as the
/// carry holds): below it, dropping them is not worth a move.
const COMPACT_MIN: usize = 4096;

/// The byte before a stream's first byte, or before a cut right after a match, as far as the
/// newline rule and the base64 extensions are concerned: one that no extension takes.
const NOTHING_BEFORE: u8 = b'\n';

/// Where the newline rule lets a stream cut: one past the last LF in the held bytes (the last
/// `hold` of the carry followed by the chunk) whose line ends, before its terminator (`\n` or
/// `\r\n`), with a byte that is neither a base64 character nor `=`. `before` is the byte before
/// the carry. `None` when there is no such LF or the rule is off. The LFs in `2..known` are
/// known not to be such a cut (an earlier push looked at them: that depends only on the bytes
/// before them, which have not changed) and are not looked at again.
///
/// A match that contains that LF would need a pattern with a raw LF: only a secret that holds a
/// line break has one (the rule is then off), or wrapped base64 and quoted-printable soft
/// breaks, whose LF always follows a base64 character or `=`; and a base64 neighbour taken
/// across a line break is a base64 character. So cutting there decides exactly what one pass
/// over the whole answer decides.
fn flush_point(
    engine: &Engine,
    carry: &[u8],
    chunk: &[u8],
    before: u8,
    known: usize,
) -> Option<usize> {
    if !engine.flushes() {
        return None;
    }
    let c = carry.len();
    let n = c + chunk.len();
    let byte = |at: usize| {
        if at < c {
            carry.get(at).copied()
        } else {
            chunk.get(at - c).copied()
        }
    };
    let low = n.saturating_sub(engine.hold());
    let cut_at = |at: usize| {
        if byte(at) != Some(b'\n') {
            return None;
        }
        let line_end = match at.checked_sub(1) {
            Some(cr) if byte(cr) == Some(b'\r') => cr,
            // A CR before the carry: the byte before it is gone; do not cut.
            None if before == b'\r' => return None,
            _ => at,
        };
        let last = line_end.checked_sub(1).map_or(Some(before), byte)?;
        // A line ending in a base64 character, `=` (a quoted-printable soft break) or `;` (the
        // end of an HTML reference such as `&#43;`, which a base64 match may end in) can go on
        // in a match, or in the neighbour a base64 match takes across the break: no cut there.
        (!is_base64_byte(last) && last != b'=' && last != b';').then_some(at + 1)
    };
    // The last cut: among the new bytes first, then among the two that depend on `before`.
    let fresh = low.max(known.min(n));
    (fresh..n)
        .rev()
        .find_map(cut_at)
        .or_else(|| (low..fresh.min(2)).rev().find_map(cut_at))
}

/// Scrubs one more part of a stream: `carry` followed by `chunk`, with `before` the byte before
/// `carry`. Cuts where the newline rule allows, deciding everything before as at the end;
/// otherwise holds back the engine's fixed hold.
fn step(
    engine: &Engine,
    carry: &[u8],
    scratch: &mut Scratch,
    chunk: &[u8],
    before: u8,
    known: usize,
    emit: impl FnMut(Piece),
) -> Done {
    match flush_point(engine, carry, chunk, before, known) {
        Some(at) => {
            let c = carry.len();
            // INVARIANT: `at` is at most the length of the carry followed by the chunk.
            let (carry, chunk) = if at <= c {
                (&carry[..at], &[][..])
            } else {
                (carry, &chunk[..at - c])
            };
            run(engine, carry, scratch, chunk, true, emit)
        }
        None => run(engine, carry, scratch, chunk, false, emit),
    }
}

/// Scrubs `carry` followed by `chunk`, calling `emit` with the output in order. With `is_end`,
/// decides everything; otherwise every match starting before `alive`, where what follows is at
/// least the engine's hold minus [`EXTENSION_MAX`] bytes: such a match, its extensions and any
/// match starting in its forward extension are then wholly in sight, so the decision is the one
/// a single pass over the whole answer makes. The cut is `alive` minus [`EXTENSION_MAX`] (a
/// match starting at or after `alive` takes at most that many bytes before it), or the end of a
/// match that ends later. So after a stretch without a match exactly the hold is kept, whatever
/// the bytes.
fn run(
    engine: &Engine,
    carry: &[u8],
    scratch: &mut Scratch,
    chunk: &[u8],
    is_end: bool,
    emit: impl FnMut(Piece),
) -> Done {
    let Scratch {
        seam,
        seam_hashes,
        chunk_hashes,
    } = scratch;
    seam.clear();
    // INVARIANT: the slice end is clamped to the chunk's length.
    if !carry.is_empty() {
        let head = &chunk[..chunk.len().min(engine.max_len())];
        reserve_wiped(seam, carry.len() + head.len());
        seam.extend_from_slice(carry);
        seam.extend_from_slice(head);
    }
    let view = View {
        engine,
        carry,
        chunk,
        seam: engine.hay(seam, seam_hashes),
        chunk_hay: engine.hay(chunk, chunk_hashes),
        n: carry.len() + chunk.len(),
    };
    decide(&view, is_end, emit)
}

/// The body of [`run`], on a view made ready (its prefix hashes computed).
fn decide(view: &View<'_>, is_end: bool, mut emit: impl FnMut(Piece)) -> Done {
    let engine = view.engine;
    let n = view.n;
    let (alive, floor_cut) = if is_end {
        (n, n)
    } else if n >= engine.hold() {
        let cut = n - engine.hold();
        (cut + EXTENSION_MAX, cut)
    } else {
        (0, 0)
    };
    let mut raw_start = 0;
    let mut marker_end = None;
    let mut next = view.find(0, alive);
    while let Some(found) = next {
        debug_assert!(found.start < alive);
        let start = if found.kind.back {
            found.start - view.back_extension(found.start, raw_start)
        } else {
            found.start
        };
        let mut end = found.end;
        let mut following = None;
        if found.kind.fwd {
            // By the hold, everything the extension and a match starting in it could need is in
            // sight before the end; at the end only what is there counts.
            debug_assert!(is_end || end + EXTENSION_MAX + engine.max_len() <= n);
            let extension = view.forward_extension(end);
            if extension > 0 {
                // A match starting in the extension takes those bytes itself.
                following = view.find(end, end + extension);
                if following.is_none() {
                    end += extension;
                }
            }
        }
        if start > raw_start {
            emit(Piece::Raw(raw_start, start));
        }
        emit(Piece::Marker);
        raw_start = end;
        marker_end = Some(end);
        next = match following {
            Some(f) if f.start < alive => Some(f),
            Some(_) => None,
            None => view.find(end, alive),
        };
    }
    let cut = if is_end { n } else { floor_cut.max(raw_start) };
    if cut > raw_start {
        emit(Piece::Raw(raw_start, cut));
    }
    let before = if cut == 0 {
        None
    } else if marker_end == Some(cut) {
        Some(NOTHING_BEFORE)
    } else {
        Some(view.byte(cut - 1))
    };
    Done { cut, before }
}

/// Whether `byte` may appear in a header name: a `tchar` of RFC 9110.
fn is_token_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&byte)
}

/// Appends `piece` (in carry-then-chunk coordinates) to `out`.
///
/// INVARIANT: `run` only emits ranges within `carry.len() + chunk.len()`.
fn emit_into(out: &mut Vec<u8>, carry: &[u8], chunk: &[u8], piece: Piece) {
    match piece {
        Piece::Raw(start, end) => {
            let c = carry.len();
            if start < c {
                out.extend_from_slice(&carry[start..end.min(c)]);
            }
            if end > c {
                out.extend_from_slice(&chunk[start.max(c) - c..end - c]);
            }
        }
        Piece::Marker => out.extend_from_slice(REDACTED.as_bytes()),
    }
}

/// Every pattern of every secret, deduplicated, the number of non-empty secrets, and whether
/// none of them holds a CR or LF byte (the newline rule's condition).
fn all_patterns<'a>(secrets: impl IntoIterator<Item = &'a [u8]>) -> (Vec<Pattern>, usize, bool) {
    let mut patterns = Vec::new();
    let mut count = 0;
    let mut flushes = true;
    for secret in secrets {
        if !secret.is_empty() {
            count += 1;
            flushes &= !secret.iter().any(|&b| b == b'\r' || b == b'\n');
            patterns::push_patterns(secret, &mut patterns);
        }
    }
    patterns::dedup(&mut patterns);
    (patterns, count, flushes)
}

#[cfg(test)]
mod tests;
