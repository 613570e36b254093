//! The matcher behind the scrubber: an Aho-Corasick automaton (leftmost-longest) over every
//! pattern of every secret, and a sampling prefilter that lets a search skip most bytes.
//!
//! The prefilter: every pattern is at least `m` bytes long. Take `q = 8` and a stride
//! `w <= m - q + 1`. Any occurrence of a pattern starting at `s` covers the position `a`, the
//! first multiple of `w` at or after `s`, together with the `q` bytes from there; and those `q`
//! bytes are the pattern's bytes at offset `a - s < w`. So the filter holds, for every pattern,
//! its `q`-byte windows at offsets `0..w` (hashed into two bitsets), and a search reads one
//! `q`-byte window every `w` bytes. A window in both bitsets sends the automaton over the few
//! bytes around it; a window in neither proves that no pattern starts in the `w` positions it
//! covers. Near the end of a haystack, where a window no longer fits, no pattern fits either.
//! Without a useful stride (a pattern shorter than 11 bytes) the automaton scans everything.

use std::fmt;

use aho_corasick::automaton::Automaton;
use aho_corasick::nfa::contiguous::NFA;
use aho_corasick::{Input, MatchKind};

use super::patterns::{EXTENSION_MAX, Kind, Pattern};

/// A match in a haystack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Found {
    pub(crate) start: usize,
    pub(crate) end: usize,
    pub(crate) kind: Kind,
}

/// The automaton could not be built.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TooLarge;

/// The compiled patterns of a set of secrets.
pub(crate) struct Engine {
    nfa: NFA,
    kinds: Vec<Kind>,
    filter: Option<Filter>,
    max_len: usize,
    /// How many bytes a stream holds back: a function of the longest pattern only (see
    /// `scrub.rs`), never of the bytes held.
    hold: usize,
    /// Whether the newline rule may release a stream early: no secret holds a CR or LF.
    flushes: bool,
    secrets: usize,
}

impl Engine {
    /// Compiles `patterns` (deduplicated, none empty) of `secrets` secrets: `Ok(None)` without
    /// any pattern, `Err` when the automaton would need more states than it can number (only
    /// with gigabytes of patterns).
    ///
    /// `flushes` says that no secret contains a CR or LF byte, so that the newline rule may
    /// release a stream early (see `scrub.rs`).
    pub(crate) fn new(
        patterns: &[Pattern],
        secrets: usize,
        flushes: bool,
    ) -> Result<Option<Engine>, TooLarge> {
        let (Some(max_len), Some(min_len)) = (
            patterns.iter().map(|p| p.bytes.len()).max(),
            patterns.iter().map(|p| p.bytes.len()).min(),
        ) else {
            return Ok(None);
        };
        let nfa = NFA::builder()
            .match_kind(MatchKind::LeftmostLongest)
            .prefilter(false)
            .build(patterns.iter().map(|p| &p.bytes[..]))
            .map_err(|_| TooLarge)?;
        let kinds = patterns.iter().map(|p| p.kind).collect();
        let filter = Filter::new(patterns, min_len);
        // A match decided now must be wholly in sight with its extension, and so must a match
        // starting in that extension (see `run` in `scrub.rs`); rounded up so that the hold
        // tells an observer only a coarse bound on the longest pattern.
        let hold = (2 * max_len + 2 * EXTENSION_MAX).next_multiple_of(HOLD_GRANULE);
        Ok(Some(Engine {
            nfa,
            kinds,
            filter,
            max_len,
            hold,
            flushes,
            secrets,
        }))
    }

    /// The longest pattern.
    pub(crate) fn max_len(&self) -> usize {
        self.max_len
    }

    /// How many bytes a stream holds back after a stretch without a match.
    pub(crate) fn hold(&self) -> usize {
        self.hold
    }

    /// Whether the newline rule is on (no secret contains a CR or LF byte).
    pub(crate) fn flushes(&self) -> bool {
        self.flushes
    }

    /// The leftmost-longest match in `hay` starting in `pos..max_start`, where `hay` is all there
    /// is to see: a pattern that would run past its end does not match.
    pub(crate) fn find(&self, hay: &[u8], pos: usize, max_start: usize) -> Option<Found> {
        let n = hay.len();
        let max_start = max_start.min(n);
        if pos >= max_start {
            return None;
        }
        let Some(filter) = &self.filter else {
            return self.find_plain(hay, pos, n).filter(|m| m.start < max_start);
        };
        let stride = filter.stride;
        let mut at = pos.next_multiple_of(stride);
        // The window at `at` covers the starts `at + 1 - stride ..= at`. A window that does not
        // fit covers no start whose pattern fits either: such a pattern would hold the window.
        while at + 1 < max_start + stride && at + WINDOW <= n {
            if filter.hit(hay, at) {
                let low = pos.max((at + 1).saturating_sub(stride));
                let high = n.min(at + self.max_len);
                if let Some(m) = self.find_plain(hay, low, high)
                    && m.start <= at
                {
                    return (m.start < max_start).then_some(m);
                }
            }
            at += stride;
        }
        None
    }

    /// The automaton's leftmost-longest match in `hay[start..end]`.
    fn find_plain(&self, hay: &[u8], start: usize, end: usize) -> Option<Found> {
        let input = Input::new(hay).range(start..end);
        match self.nfa.try_find(&input) {
            Ok(found) => found.map(|m| Found {
                start: m.start(),
                end: m.end(),
                kind: self
                    .kinds
                    .get(m.pattern().as_usize())
                    .copied()
                    .unwrap_or_default(),
            }),
            // The NFA supports every search this module asks for; if it ever refuses one, fail
            // closed and redact the whole range.
            Err(_) => Some(Found {
                start,
                end,
                kind: Kind::default(),
            }),
        }
    }
}

impl fmt::Debug for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The automaton and the filter are derived from secrets: show counts only.
        f.debug_struct("Engine")
            .field("secrets", &self.secrets)
            .finish_non_exhaustive()
    }
}

/// Two bitsets of hashed `q`-byte windows, and the stride between sampled windows.
struct Filter {
    stride: usize,
    shift: u32,
    first: Vec<u64>,
    second: Vec<u64>,
}

impl Filter {
    fn new(patterns: &[Pattern], min_len: usize) -> Option<Filter> {
        let stride = (min_len + 1).checked_sub(WINDOW)?.min(MAX_STRIDE);
        if stride < MIN_STRIDE {
            return None;
        }
        let windows = patterns.len() * stride;
        let bits = (windows * 32)
            .next_power_of_two()
            .clamp(1 << MIN_BITS_LOG2, 1 << MAX_BITS_LOG2);
        let shift = 64 - bits.trailing_zeros();
        let mut filter = Filter {
            stride,
            shift,
            first: vec![0; bits / 64],
            second: vec![0; bits / 64],
        };
        for pattern in patterns {
            for offset in 0..stride {
                let key = window(&pattern.bytes, offset)?;
                let (a, b) = filter.slots(key);
                set(&mut filter.first, a);
                set(&mut filter.second, b);
            }
        }
        Some(filter)
    }

    #[inline]
    fn slots(&self, key: u64) -> (usize, usize) {
        let a = key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.shift;
        let b = key.wrapping_mul(0xC2B2_AE3D_27D4_EB4F).rotate_left(29) >> self.shift;
        // INVARIANT: `shift` leaves at most log2(bits) bits, which fit a usize index.
        (a as usize, b as usize)
    }

    /// Whether the window at `at` may belong to a pattern; `true` when it does not fit.
    #[inline]
    fn hit(&self, hay: &[u8], at: usize) -> bool {
        let Some(key) = window(hay, at) else {
            return true;
        };
        let (a, b) = self.slots(key);
        test(&self.first, a) && test(&self.second, b)
    }
}

#[inline]
fn window(bytes: &[u8], at: usize) -> Option<u64> {
    let slice = bytes.get(at..at.checked_add(WINDOW)?)?;
    let array: [u8; WINDOW] = slice.try_into().ok()?;
    Some(u64::from_le_bytes(array))
}

fn set(bits: &mut [u64], slot: usize) {
    if let Some(word) = bits.get_mut(slot / 64) {
        *word |= 1 << (slot % 64);
    }
}

#[inline]
fn test(bits: &[u64], slot: usize) -> bool {
    bits.get(slot / 64)
        .is_none_or(|word| word & (1 << (slot % 64)) != 0)
}

/// The bytes read at each sampled position.
const WINDOW: usize = 8;
/// The longest stride: more would add windows to the filter for little gain.
const MAX_STRIDE: usize = 16;
/// Below this stride sampling costs more than it saves.
const MIN_STRIDE: usize = 4;
const MIN_BITS_LOG2: u32 = 12;
const MAX_BITS_LOG2: u32 = 21;
/// The hold is a multiple of this many bytes.
const HOLD_GRANULE: usize = 64;
