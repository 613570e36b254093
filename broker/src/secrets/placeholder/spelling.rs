//! Reads placeholders through the escapes a receiver would undo: percent-encoding, and JSON string
//! escapes followed by percent-encoding.
//!
//! Decoding happens unit by unit from the start of the text, as the receiver does it, without
//! building a decoded copy: a unit is one raw byte, a `%XX` escape, or (in JSON) a `\` escape. Each
//! hit reports its raw span and whether it was spelled without any escape.

use std::collections::VecDeque;
use std::ops::Range;

use aho_corasick::automaton::Automaton as _;
use aho_corasick::{Anchored, Input};
use mint_policy::policy::is_alias_name;

use super::shaped::ShapedPlaceholders;
use super::{MalformedReason, Part, PlaceholderError};

/// The escapes undone before looking for a placeholder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Layer {
    /// `%XX` escapes (any hex case); a `%` not followed by two hex digits is itself.
    Percent,
    /// The content of a JSON string token: its escapes, then `%XX` escapes over the result.
    JsonPercent,
}

/// One placeholder read from a text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Hit {
    /// The alias it names.
    pub(crate) alias: String,
    /// Its raw bytes in the text.
    pub(crate) span: Range<usize>,
    /// Whether it is spelled without escapes, exactly `{{mint:NAME}}` or the alias's shaped
    /// value.
    pub(crate) raw: bool,
}

/// What the scan of a text reports, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Event {
    /// A placeholder.
    Hit(Hit),
    /// `{{mint:` not followed by an alias name and `}}`, at this offset of the text.
    Malformed {
        /// The offset of its `{` unit.
        offset: usize,
        /// What is wrong.
        reason: MalformedReason,
    },
}

/// Calls `on_hit` for every placeholder of `raw`, in order; stops at the first malformed one.
pub(crate) fn hits(
    raw: &[u8],
    layer: Layer,
    shaped: &ShapedPlaceholders,
    part: &Part,
    mut on_hit: impl FnMut(Hit) -> Result<(), PlaceholderError>,
) -> Result<(), PlaceholderError> {
    events(raw, layer, shaped, |event| match event {
        Event::Hit(hit) => on_hit(hit),
        Event::Malformed { offset, reason } => Err(PlaceholderError::Malformed {
            part: part.clone(),
            offset,
            reason,
        }),
    })
}

/// Calls `on_event` for every placeholder (`{{mint:NAME}}` or a shaped value of `shaped`) and
/// every malformed one of `raw`, in order. After a malformed one the scan goes on from the unit
/// after its first `{`; it stops at the first error `on_event` returns.
pub(crate) fn events(
    raw: &[u8],
    layer: Layer,
    shaped: &ShapedPlaceholders,
    on_event: impl FnMut(Event) -> Result<(), PlaceholderError>,
) -> Result<(), PlaceholderError> {
    match shaped.automaton() {
        None => braces(raw, layer, on_event),
        Some(_) => automaton(raw, layer, shaped, on_event),
    }
}

/// [`events`] without shaped placeholders: only `{{mint:` can start one, so everything but `{`
/// and escapes is skipped in bulk.
fn braces(
    raw: &[u8],
    layer: Layer,
    mut on_event: impl FnMut(Event) -> Result<(), PlaceholderError>,
) -> Result<(), PlaceholderError> {
    let mut pos = 0;
    while pos < raw.len() {
        // Bytes other than these are single units that are not `{`, so skip them in bulk; every
        // byte found is the start of a unit (an escape's own bytes are hex digits or letters).
        // INVARIANT: `pos < raw.len()` by the loop condition.
        let next = match layer {
            Layer::Percent => memchr::memchr2(b'{', b'%', &raw[pos..]),
            Layer::JsonPercent => memchr::memchr3(b'{', b'%', b'\\', &raw[pos..]),
        };
        let Some(skip) = next else {
            break;
        };
        pos += skip;
        let Some((byte, after)) = unit(raw, pos, layer) else {
            break;
        };
        if byte == b'{' {
            match read_placeholder(raw, pos, layer) {
                Some(Ok((alias, end))) => {
                    let raw_spelling = end - pos == PREFIX.len() + alias.len() + SUFFIX.len();
                    on_event(Event::Hit(Hit {
                        alias,
                        span: pos..end,
                        raw: raw_spelling,
                    }))?;
                    pos = end;
                    continue;
                }
                Some(Err(reason)) => on_event(Event::Malformed {
                    offset: pos,
                    reason,
                })?,
                None => {}
            }
        }
        pos = after;
    }
    Ok(())
}

/// [`events`] with shaped placeholders: every decoded unit goes through the one automaton over
/// `{{mint:` and every shaped value. Where `{{mint:` ends, the placeholder is read from its `{`
/// as [`braces`] reads it; where a value ends, it is a hit for its alias, raw when no unit of it
/// was an escape. After a hit the scan goes on after it.
fn automaton(
    raw: &[u8],
    layer: Layer,
    shaped: &ShapedPlaceholders,
    mut on_event: impl FnMut(Event) -> Result<(), PlaceholderError>,
) -> Result<(), PlaceholderError> {
    let Some((dfa, longest)) = shaped.automaton() else {
        return braces(raw, layer, on_event);
    };
    let escaped = match layer {
        Layer::Percent => memchr::memchr(b'%', raw).is_some(),
        Layer::JsonPercent => memchr::memchr2(b'%', b'\\', raw).is_some(),
    };
    if !escaped {
        return unescaped(raw, layer, shaped, on_event);
    }
    // INVARIANT: the automaton is built with unanchored starts (`shaped::from_values`).
    let Ok(start_state) = dfa.start_state(Anchored::No) else {
        return braces(raw, layer, on_event);
    };
    let mut state = start_state;
    // Where each of the last `longest` units starts: a match of n units starts n back.
    let mut starts: VecDeque<usize> = VecDeque::with_capacity(longest);
    let mut pos = 0;
    while let Some((byte, after)) = unit(raw, pos, layer) {
        if starts.len() == longest {
            starts.pop_front();
        }
        starts.push_back(pos);
        state = dfa.next_state(Anchored::No, state, byte);
        if dfa.is_match(state) {
            let pattern = dfa.match_pattern(state, 0);
            let units = dfa.pattern_len(pattern);
            // INVARIANT: the automaton saw every unit of the match since its last reset, and
            // each was recorded; `units <= longest`.
            let start = starts
                .len()
                .checked_sub(units)
                .and_then(|at| starts.get(at).copied())
                .unwrap_or(pos);
            match shaped.alias_of(pattern.as_usize()) {
                Some(alias) => {
                    on_event(Event::Hit(Hit {
                        alias: alias.to_owned(),
                        span: start..after,
                        raw: after - start == units,
                    }))?;
                    state = start_state;
                    starts.clear();
                    pos = after;
                    continue;
                }
                None => match read_placeholder(raw, start, layer) {
                    Some(Ok((alias, end))) => {
                        let raw_spelling = end - start == PREFIX.len() + alias.len() + SUFFIX.len();
                        on_event(Event::Hit(Hit {
                            alias,
                            span: start..end,
                            raw: raw_spelling,
                        }))?;
                        state = start_state;
                        starts.clear();
                        pos = end;
                        continue;
                    }
                    Some(Err(reason)) => on_event(Event::Malformed {
                        offset: start,
                        reason,
                    })?,
                    None => {}
                },
            }
        }
        pos = after;
    }
    Ok(())
}

/// [`automaton`] over a text without any escape: every unit is one byte (a byte outside ASCII
/// reads as [`NON_ASCII`], which no pattern holds), so the automaton searches the bytes
/// themselves, skipping ahead with its prefilter, and every hit is raw. The same events, in the
/// same order, as stepping unit by unit.
fn unescaped(
    raw: &[u8],
    layer: Layer,
    shaped: &ShapedPlaceholders,
    mut on_event: impl FnMut(Event) -> Result<(), PlaceholderError>,
) -> Result<(), PlaceholderError> {
    let Some((dfa, _)) = shaped.automaton() else {
        return braces(raw, layer, on_event);
    };
    let mut pos = 0;
    while pos < raw.len() {
        let input = Input::new(raw).range(pos..).anchored(Anchored::No);
        let Ok(Some(found)) = dfa.try_find(&input) else {
            break;
        };
        match shaped.alias_of(found.pattern().as_usize()) {
            Some(alias) => {
                on_event(Event::Hit(Hit {
                    alias: alias.to_owned(),
                    span: found.range(),
                    raw: true,
                }))?;
                pos = found.end();
            }
            None => match read_placeholder(raw, found.start(), layer) {
                Some(Ok((alias, end))) => {
                    on_event(Event::Hit(Hit {
                        alias,
                        span: found.start()..end,
                        raw: true,
                    }))?;
                    pos = end;
                }
                Some(Err(reason)) => {
                    on_event(Event::Malformed {
                        offset: found.start(),
                        reason,
                    })?;
                    pos = found.start() + 1;
                }
                None => pos = found.start() + 1,
            },
        }
    }
    Ok(())
}

/// Reads a placeholder whose `{` unit starts at `start`: `None` when the prefix `{{mint:` is not
/// there; else the alias and the end of its `}}`, or why it is malformed.
fn read_placeholder(
    raw: &[u8],
    start: usize,
    layer: Layer,
) -> Option<Result<(String, usize), MalformedReason>> {
    let mut pos = start;
    for &expected in PREFIX {
        let (byte, after) = unit(raw, pos, layer)?;
        if byte != expected {
            return None;
        }
        pos = after;
    }
    let mut name = String::new();
    while name.len() <= MAX_NAME {
        match unit(raw, pos, layer) {
            Some((byte, after)) if is_name_byte(byte) => {
                name.push(char::from(byte));
                pos = after;
            }
            _ => break,
        }
    }
    let name_end = pos;
    let closed = match unit(raw, pos, layer) {
        Some((b'}', after)) => matches!(unit(raw, after, layer), Some((b'}', _))),
        _ => false,
    };
    if closed && is_alias_name(&name) {
        // INVARIANT: `closed` saw two `}` units from `pos`.
        let (_, after) = unit(raw, pos, layer)?;
        let (_, end) = unit(raw, after, layer)?;
        return Some(Ok((name, end)));
    }
    // A name that stops early (`{{mint:GitHub}}`) is an invalid name when `}}` comes soon after;
    // otherwise the placeholder was never closed.
    Some(Err(if closing_follows(raw, name_end, layer) {
        MalformedReason::InvalidName
    } else {
        MalformedReason::Unclosed
    }))
}

/// Whether `}}` follows within a name's length.
fn closing_follows(raw: &[u8], mut pos: usize, layer: Layer) -> bool {
    let mut previous = 0u8;
    for _ in 0..=MAX_NAME + 2 {
        let Some((byte, after)) = unit(raw, pos, layer) else {
            return false;
        };
        if previous == b'}' && byte == b'}' {
            return true;
        }
        previous = byte;
        pos = after;
    }
    false
}

/// The decoded unit at `pos` and the position after it; `None` at the end. A unit that decodes
/// to a character outside ASCII reads as `0x80`: no placeholder byte is outside ASCII.
fn unit(raw: &[u8], pos: usize, layer: Layer) -> Option<(u8, usize)> {
    match layer {
        Layer::Percent => percent_unit(raw, pos, |raw, pos| {
            raw.get(pos).map(|&byte| (byte, pos + 1))
        }),
        Layer::JsonPercent => percent_unit(raw, pos, json_unit),
    }
}

/// A `%XX` escape read over the units of `inner`, or one unit of `inner`.
fn percent_unit(
    raw: &[u8],
    pos: usize,
    inner: impl Fn(&[u8], usize) -> Option<(u8, usize)>,
) -> Option<(u8, usize)> {
    let (byte, after) = inner(raw, pos)?;
    if byte != b'%' {
        return Some((byte, after));
    }
    let escape = inner(raw, after).and_then(|(high, middle)| {
        let (low, end) = inner(raw, middle)?;
        Some(((hex_value(high)? << 4) | hex_value(low)?, end))
    });
    Some(escape.unwrap_or((byte, after)))
}

/// One unit of a JSON string's content: a byte, or a `\` escape.
fn json_unit(raw: &[u8], pos: usize) -> Option<(u8, usize)> {
    let byte = *raw.get(pos)?;
    if byte != b'\\' {
        return Some((if byte.is_ascii() { byte } else { NON_ASCII }, pos + 1));
    }
    let decoded = match raw.get(pos + 1) {
        Some(b'"') => b'"',
        Some(b'\\') => b'\\',
        Some(b'/') => b'/',
        Some(b'b') => 0x08,
        Some(b'f') => 0x0c,
        Some(b'n') => b'\n',
        Some(b'r') => b'\r',
        Some(b't') => b'\t',
        Some(b'u') => {
            let digits = raw.get(pos + 2..pos + 6)?;
            let code = digits
                .iter()
                .try_fold(0u32, |acc, &d| Some((acc << 4) | u32::from(hex_value(d)?)))?;
            let byte = u8::try_from(code)
                .ok()
                .filter(u8::is_ascii)
                .unwrap_or(NON_ASCII);
            return Some((byte, pos + 6));
        }
        // The tokenizer admits no other escape; read a stray `\` as itself.
        _ => return Some((b'\\', pos + 1)),
    };
    Some((decoded, pos + 2))
}

fn hex_value(byte: u8) -> Option<u8> {
    match byte {
        b'0'..=b'9' => Some(byte - b'0'),
        b'a'..=b'f' => Some(byte - b'a' + 10),
        b'A'..=b'F' => Some(byte - b'A' + 10),
        _ => None,
    }
}

fn is_name_byte(byte: u8) -> bool {
    byte.is_ascii_lowercase() || byte.is_ascii_digit() || byte == b'_' || byte == b'-'
}

/// What opens a placeholder, after decoding.
pub(crate) const PREFIX: &[u8] = b"{{mint:";
/// What closes a placeholder, after decoding.
pub(crate) const SUFFIX: &[u8] = b"}}";
/// The longest alias name.
const MAX_NAME: usize = 64;
/// What a unit outside ASCII reads as.
const NON_ASCII: u8 = 0x80;
