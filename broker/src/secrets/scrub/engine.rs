//! The matcher behind the scrubber. Its work on a haystack depends on the haystack's length and
//! on where complete matches are, never on how much of a pattern a stretch of the haystack
//! holds: an agent that has its guesses at a secret reflected in an answer must not learn from
//! Mint's CPU time which guess came closer. (An automaton walks deeper for a longer partial
//! match, and a prefilter that runs it only near pattern-like windows does more work for a
//! window that is right; the outside review of issue 22 recovered a secret byte by byte from
//! either, through the encodings that spend several bytes on each secret byte.)
//!
//! How. Every pattern is at least `m` bytes long. Take `q = min(8, m)` and a stride
//! `w <= m - q + 1`. An occurrence starting at `s` holds the `q` bytes at `a`, the first
//! multiple of `w` at or after `s`, and those are the pattern's bytes at offset `a - s < w`. So
//! the search reads the `q`-byte window at every multiple of `w` and looks it up in a table
//! built from every pattern's windows at offsets `0..w`. A slot of that table lists pairs
//! `(offset, length)`: "a pattern of this length may start `offset` bytes before the window".
//!
//! Every window then costs the same, `P` pairs, where `P` is the longest list of any slot: a
//! slot's own pairs, then as many of the pairs stored after them as make up `P`, evaluated
//! alike and discarded (an empty slot points somewhere into the pairs too). A pair costs one
//! hash, of its `length` bytes from `a - offset`, read off the haystack's prefix hashes
//! (computed once, one multiplication a byte), and one bit of a bitset of the patterns' hashes.
//! A set bit, which a hash that is not a pattern's sets with probability 1/16 whatever the
//! bytes (the full hash of a near miss is as random as any other), costs a look in a bucket of
//! fingerprints read in full; a fingerprint found there costs a comparison of the bytes, and
//! that is a complete match (or, once in about 2^30 such looks, a collision the comparison
//! rejects). So the only work that depends on the haystack's bytes beyond its length is the
//! memory the lookups touch: the slot a window picks, and the bit and bucket a hash picks; the
//! tables are small (a few hundred kilobytes for a secret), and a window that is right reads a slot
//! and as many pairs as a window that is wrong.
//!
//! The hash is a polynomial over 64-bit words with a random odd base drawn per engine:
//! `H(x) = sum x[i] * base^(len - 1 - i)`. Two strings of one length that differ in one byte
//! never share a fingerprint (their hashes differ by a non-zero byte times an odd number);
//! colliding on purpose would take knowing the pattern.

use std::fmt;

use super::patterns::{EXTENSION_MAX, Kind, Pattern};

/// A match in a haystack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Found {
    pub(crate) start: usize,
    pub(crate) end: usize,
    pub(crate) kind: Kind,
}

/// The patterns would need tables larger than the engine accepts (or no hash base kept the
/// patterns' fingerprints apart, which does not happen in practice).
#[derive(Clone, Copy, Debug)]
pub(crate) struct TooLarge;

/// A haystack with its prefix hashes: `prefix[i]` is the hash of its first `i` bytes.
pub(crate) struct Hay<'a> {
    bytes: &'a [u8],
    prefix: &'a [u64],
}

impl<'a> Hay<'a> {
    /// `bytes` with their prefix hashes as [`Engine::extend_prefix`] wrote them, possibly as
    /// the tail of a longer buffer's: `prefix[i]` then hashes everything before `bytes[i]`, and
    /// the hash of any stretch of `bytes` comes out the same.
    pub(crate) fn new(bytes: &'a [u8], prefix: &'a [u64]) -> Hay<'a> {
        debug_assert_eq!(prefix.len(), bytes.len() + 1);
        Hay { bytes, prefix }
    }

    /// The hash of `bytes[start..end]`, where `pow` is the base to the power `end - start`.
    /// Any `start <= end <= len` costs the same.
    #[inline]
    fn hash(&self, start: usize, end: usize, pow: u64) -> u64 {
        let high = self.prefix.get(end).copied().unwrap_or(0);
        let low = self.prefix.get(start).copied().unwrap_or(0);
        high.wrapping_sub(low.wrapping_mul(pow))
    }
}

/// The compiled patterns of a set of secrets.
pub(crate) struct Engine {
    patterns: Vec<Pattern>,
    /// The hash base to the powers 1 to 4.
    powers: [u64; 4],
    /// `q`: the bytes read at each sampled position.
    window: usize,
    /// `w`: the distance between sampled positions.
    stride: usize,
    /// The window table: where each slot's pairs start in `pairs`, and how many are its own.
    slots: Vec<Slot>,
    slot_shift: u32,
    /// Every slot's pairs, one slot after another, followed by `per_window` more (copies), so
    /// that `per_window` pairs from any slot's start are in bounds.
    pairs: Vec<Pair>,
    /// `P`: the pairs evaluated for every window.
    per_window: usize,
    /// The patterns' lengths, and the hash base to the power of each, by a pair's `len`.
    lens: Vec<u32>,
    pows: Vec<u64>,
    /// One bit per hash place, set where a pattern's hash falls.
    bits: Vec<u64>,
    bits_shift: u32,
    /// The patterns' fingerprints: `keys.len() / per_bucket` buckets of `per_bucket` each.
    keys: Vec<Key>,
    per_bucket: usize,
    bucket_shift: u32,
    min_len: usize,
    max_len: usize,
    /// How many bytes a stream holds back: a function of the longest pattern only (see
    /// `scrub.rs`), never of the bytes held.
    hold: usize,
    /// Whether the newline rule may release a stream early: no secret holds a CR or LF.
    flushes: bool,
    secrets: usize,
}

/// A slot of the window table: its pairs are `pairs[start..start + count]`.
#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    start: u32,
    count: u32,
}

/// "A pattern of length `lens[len]` may start `offset` bytes before this window" (small, so
/// that a window's pairs take a cache line or two).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
struct Pair {
    offset: u16,
    len: u16,
}

/// A pattern's fingerprint and its index plus one; 0 marks an empty place. No `Debug`: the
/// fingerprint is derived from a secret.
#[derive(Clone, Copy, Default)]
struct Key {
    fingerprint: u32,
    pattern: u32,
}

impl Engine {
    /// Compiles `patterns` (deduplicated, none empty) of `secrets` secrets: `Ok(None)` without
    /// any pattern, `Err` when a table would pass [`MAX_TABLE_BYTES`] (or a count its type).
    ///
    /// `flushes` says that no secret contains a CR or LF byte, so that the newline rule may
    /// release a stream early (see `scrub.rs`).
    pub(crate) fn new(
        patterns: Vec<Pattern>,
        secrets: usize,
        flushes: bool,
    ) -> Result<Option<Engine>, TooLarge> {
        let (Some(max_len), Some(min_len)) = (
            patterns.iter().map(|p| p.bytes.len()).max(),
            patterns.iter().map(|p| p.bytes.len()).min(),
        ) else {
            return Ok(None);
        };
        if min_len == 0 || u32::try_from(max_len).is_err() || u32::try_from(patterns.len()).is_err()
        {
            return Err(TooLarge);
        }
        let window = min_len.min(WINDOW);
        let stride = (min_len + 1 - window).min(MAX_STRIDE);
        // INVARIANT: lengths fit a u32 (checked above).
        let mut lens: Vec<u32> = patterns.iter().map(|p| p.bytes.len() as u32).collect();
        lens.sort_unstable();
        lens.dedup();
        if lens.len() > usize::from(u16::MAX) || stride > usize::from(u16::MAX) {
            return Err(TooLarge);
        }
        let hashes = HashTables::new(&patterns)?;
        let pows = lens
            .iter()
            .map(|&len| hashes.base.wrapping_pow(len))
            .collect();
        let windows = WindowTable::new(&patterns, window, stride, &lens)?;
        // A match decided now must be wholly in sight with its extension, and so must a match
        // starting in that extension (see `run` in `scrub.rs`); rounded up so that the hold
        // tells an observer only a coarse bound on the longest pattern.
        let hold = (2 * max_len + 2 * EXTENSION_MAX).next_multiple_of(HOLD_GRANULE);
        Ok(Some(Engine {
            patterns,
            powers: [1, 2, 3, 4].map(|k| hashes.base.wrapping_pow(k)),
            window,
            stride,
            slots: windows.slots,
            slot_shift: windows.shift,
            pairs: windows.pairs,
            per_window: windows.per_window,
            lens,
            pows,
            bits: hashes.bits,
            bits_shift: hashes.bits_shift,
            keys: hashes.keys,
            per_bucket: hashes.per_bucket,
            bucket_shift: hashes.bucket_shift,
            min_len,
            max_len,
            hold,
            flushes,
            secrets,
        }))
    }

    /// The shortest pattern.
    pub(crate) fn min_len(&self) -> usize {
        self.min_len
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

    /// The tables' shape, for the build figures: window, stride, slots, pairs a window, bytes
    /// of all tables.
    #[cfg(test)]
    pub(crate) fn shape(&self) -> [usize; 5] {
        [
            self.window,
            self.stride,
            self.slots.len(),
            self.per_window,
            self.slots.len() * size_of::<Slot>()
                + self.pairs.len() * size_of::<Pair>()
                + self.bits.len() * 8
                + self.keys.len() * size_of::<Key>(),
        ]
    }

    /// `bytes` ready to be searched, its prefix hashes written to `buf` (one multiplication a
    /// byte, whatever the bytes).
    pub(crate) fn hay<'a>(&self, bytes: &'a [u8], buf: &'a mut Vec<u64>) -> Hay<'a> {
        buf.clear();
        self.extend_prefix(bytes, buf);
        Hay { bytes, prefix: buf }
    }

    /// Brings `prefix` up to `bytes`: given the prefix hashes of the first `prefix.len() - 1`
    /// bytes (or nothing), appends those of the rest, one multiplication a byte. A stream that
    /// only appends hashes each byte once.
    pub(crate) fn extend_prefix(&self, bytes: &[u8], prefix: &mut Vec<u64>) {
        if prefix.is_empty() {
            prefix.push(0);
        }
        let done = prefix.len() - 1;
        let Some(rest) = bytes.get(done..) else {
            debug_assert!(false, "prefix hashes past the bytes");
            return;
        };
        let mut hash = prefix.last().copied().unwrap_or(0);
        // Appended as computed (growing the buffer first would write every entry twice), into
        // room made beforehand: the hashes are derived from answer bytes.
        crate::secrets::reserve_wiped(prefix, rest.len());
        let [b1, b2, b3, b4] = self.powers;
        let quads = rest.chunks_exact(4);
        let tail = quads.remainder();
        // Four bytes a step: the chain from one step to the next is one multiplication, the
        // others run beside it.
        for quad in quads {
            let [x0, x1, x2, x3] = [quad[0], quad[1], quad[2], quad[3]].map(u64::from);
            let c2 = x0.wrapping_mul(b1).wrapping_add(x1);
            let c3 = c2.wrapping_mul(b1).wrapping_add(x2);
            let c4 = c3.wrapping_mul(b1).wrapping_add(x3);
            let step = [
                hash.wrapping_mul(b1).wrapping_add(x0),
                hash.wrapping_mul(b2).wrapping_add(c2),
                hash.wrapping_mul(b3).wrapping_add(c3),
                hash.wrapping_mul(b4).wrapping_add(c4),
            ];
            hash = step[3];
            prefix.extend_from_slice(&step);
        }
        for &byte in tail {
            hash = hash.wrapping_mul(b1).wrapping_add(u64::from(byte));
            prefix.push(hash);
        }
    }

    /// Whether `bytes` holds a match anywhere.
    pub(crate) fn is_match(&self, bytes: &[u8]) -> bool {
        if bytes.len() < self.min_len {
            return false;
        }
        let mut buf = Vec::new();
        let hay = self.hay(bytes, &mut buf);
        self.find(&hay, 0, bytes.len()).is_some()
    }

    /// The leftmost-longest match in `hay` starting in `pos..max_start`, where `hay` is all there
    /// is to see: a pattern that would run past its end does not match.
    pub(crate) fn find(&self, hay: &Hay<'_>, pos: usize, max_start: usize) -> Option<Found> {
        let n = hay.bytes.len();
        let max_start = max_start.min(n);
        if pos >= max_start {
            return None;
        }
        let stride = self.stride;
        let mut at = pos.next_multiple_of(stride);
        // The window at `at` covers the starts `at + 1 - stride ..= at`. A window that does not
        // fit covers no start whose pattern fits either: such a pattern would hold the window.
        while at + 1 < max_start + stride && at + self.window <= n {
            if let Some(found) = self.sample(hay, at, pos, max_start) {
                return Some(found);
            }
            at += stride;
        }
        None
    }

    /// The leftmost-longest match among the starts the window at `at` covers, limited to
    /// `pos..max_start`: `per_window` pairs for every window.
    #[inline]
    fn sample(&self, hay: &Hay<'_>, at: usize, pos: usize, max_start: usize) -> Option<Found> {
        let n = hay.bytes.len();
        let slot = self
            .slots
            .get(self.slot(window(hay.bytes, at, self.window)))
            .copied()
            .unwrap_or_default();
        let first = slot.start as usize;
        let pairs = self
            .pairs
            .get(first..first + self.per_window)
            .unwrap_or(&[]);
        work::count(work::PAIRS, pairs.len() as u64);
        let mut best: Option<Found> = None;
        for (i, pair) in pairs.iter().enumerate() {
            let offset = usize::from(pair.offset);
            let len32 = self.lens.get(usize::from(pair.len)).copied().unwrap_or(0);
            let pow = self.pows.get(usize::from(pair.len)).copied().unwrap_or(1);
            let len = len32 as usize;
            let start = at.wrapping_sub(offset);
            // Clamped so that every pair reads the prefix hashes, in bounds or not.
            let low = start.min(n);
            let high = low.saturating_add(len).min(n);
            let mixed = place(hay.hash(low, high, pow), len32);
            if !self.may_be_pattern(mixed) {
                continue;
            }
            // Whatever the pair, own or borrowed, fitting or not: a set bit says nothing about
            // how close the bytes came.
            work::count(work::BUCKETS, 1);
            let index = self.lookup(mixed);
            let own = i < slot.count as usize;
            let fits = offset <= at && start >= pos && start < max_start && len <= n - low;
            if index == 0 || !own || !fits {
                continue;
            }
            // A pattern's fingerprint: almost surely a match; the bytes decide.
            let Some(pattern) = self.patterns.get(index as usize - 1) else {
                continue;
            };
            work::count(work::COMPARES, 1);
            if hay.bytes.get(start..start + len) != Some(&pattern.bytes[..]) {
                continue;
            }
            let better =
                best.is_none_or(|b| start < b.start || (start == b.start && start + len > b.end));
            if better {
                best = Some(Found {
                    start,
                    end: start + len,
                    kind: pattern.kind,
                });
            }
        }
        best
    }

    #[inline]
    fn slot(&self, window: u64) -> usize {
        // INVARIANT: the shift leaves as many bits as the slot count has, which fits a usize.
        (window.wrapping_mul(SLOT_MUL) >> self.slot_shift) as usize
    }

    /// Whether the bit for a hash placed at `mixed` is set.
    #[inline]
    fn may_be_pattern(&self, mixed: u64) -> bool {
        let bit = mixed >> self.bits_shift;
        self.bits
            .get((bit / 64) as usize)
            .is_some_and(|word| word & (1 << (bit % 64)) != 0)
    }

    /// The pattern index plus one whose fingerprint is that of a hash placed at `mixed`; 0
    /// when there is none. Reads the whole bucket, found or not.
    #[inline]
    fn lookup(&self, mixed: u64) -> u32 {
        // INVARIANT: the shift leaves as many bits as the bucket count has.
        let first = (mixed >> self.bucket_shift) as usize * self.per_bucket;
        let fingerprint = mixed as u32;
        let keys = self.keys.get(first..first + self.per_bucket).unwrap_or(&[]);
        keys.iter().fold(0, |found, key| {
            found | (u32::from(key.fingerprint == fingerprint) * key.pattern)
        })
    }
}

impl fmt::Debug for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The tables are derived from secrets: show counts only.
        f.debug_struct("Engine")
            .field("secrets", &self.secrets)
            .finish_non_exhaustive()
    }
}

/// Where `len` bytes hashing to `hash` fall (the length keeps hashes of different lengths
/// apart): the high bits pick a bit and a bucket, the low 32 bits are the fingerprint. Strings
/// one byte apart never share a fingerprint: their hashes differ by a non-zero byte times an
/// odd number, and so do the products' low bits.
#[inline]
fn place(hash: u64, len: u32) -> u64 {
    hash.wrapping_add(u64::from(len).wrapping_mul(LEN_MUL))
        .wrapping_mul(PLACE_MUL)
}

/// The polynomial hash of `bytes` with `base`.
fn hash_of(bytes: &[u8], base: u64) -> u64 {
    bytes.iter().fold(0u64, |hash, &byte| {
        hash.wrapping_mul(base).wrapping_add(u64::from(byte))
    })
}

/// A random odd hash base (a fixed odd one if the system has no randomness to give: the
/// comparison after every hit keeps the matches exact either way, and a collision on purpose
/// needs the pattern).
fn random_base() -> u64 {
    let mut bytes = [0u8; 8];
    if getrandom::fill(&mut bytes).is_err() {
        bytes = 0x9E37_79B9_7F4A_7C15u64.to_le_bytes();
    }
    u64::from_le_bytes(bytes) | 1
}

/// The bitset and the fingerprint buckets of the patterns' hashes, and the base they use.
struct HashTables {
    base: u64,
    bits: Vec<u64>,
    bits_shift: u32,
    keys: Vec<Key>,
    per_bucket: usize,
    bucket_shift: u32,
}

impl HashTables {
    fn new(patterns: &[Pattern]) -> Result<HashTables, TooLarge> {
        let bit_count = (patterns.len() * BITS_PER_PATTERN)
            .next_power_of_two()
            .max(64);
        let bits_shift = 64 - bit_count.trailing_zeros();
        let buckets = (patterns.len() * 2).next_power_of_two().max(16);
        let bucket_shift = 64 - buckets.trailing_zeros();
        for _ in 0..BASE_ATTEMPTS {
            let base = random_base();
            let mut places: Vec<(usize, u32, u32)> = Vec::with_capacity(patterns.len());
            let mut bits = vec![0u64; bit_count / 64];
            for (index, pattern) in patterns.iter().enumerate() {
                // INVARIANT: `Engine::new` checked that lengths and the count fit a u32.
                let mixed = place(hash_of(&pattern.bytes, base), pattern.bytes.len() as u32);
                let bit = (mixed >> bits_shift) as usize;
                if let Some(word) = bits.get_mut(bit / 64) {
                    *word |= 1 << (bit % 64);
                }
                places.push((
                    (mixed >> bucket_shift) as usize,
                    mixed as u32,
                    index as u32 + 1,
                ));
            }
            places.sort_unstable();
            // Two patterns in one place would be confused: draw another base.
            if places
                .windows(2)
                .any(|p| (p[0].0, p[0].1) == (p[1].0, p[1].1))
            {
                continue;
            }
            let mut counts = vec![0usize; buckets];
            for &(bucket, _, _) in &places {
                counts[bucket] += 1;
            }
            let per_bucket = counts.iter().copied().max().unwrap_or(1).max(1);
            if buckets * per_bucket * size_of::<Key>() > MAX_TABLE_BYTES {
                return Err(TooLarge);
            }
            let mut keys = vec![Key::default(); buckets * per_bucket];
            let mut filled = vec![0usize; buckets];
            for (bucket, fingerprint, pattern) in places {
                keys[bucket * per_bucket + filled[bucket]] = Key {
                    fingerprint,
                    pattern,
                };
                filled[bucket] += 1;
            }
            return Ok(HashTables {
                base,
                bits,
                bits_shift,
                keys,
                per_bucket,
                bucket_shift,
            });
        }
        Err(TooLarge)
    }
}

/// The window table.
struct WindowTable {
    slots: Vec<Slot>,
    shift: u32,
    pairs: Vec<Pair>,
    per_window: usize,
}

impl WindowTable {
    /// For every pattern and every offset `0..stride`, the pattern's window there lists
    /// `(offset, length)` in its slot.
    fn new(
        patterns: &[Pattern],
        window_len: usize,
        stride: usize,
        lens: &[u32],
    ) -> Result<WindowTable, TooLarge> {
        let mut entries: Vec<(u64, Pair)> = Vec::with_capacity(patterns.len() * stride);
        for pattern in patterns {
            // INVARIANT: `Engine::new` checked that lengths fit a u32, that there are at most
            // u16::MAX of them and that the stride fits a u16.
            let len = lens
                .binary_search(&(pattern.bytes.len() as u32))
                .map_err(|_| TooLarge)? as u16;
            for offset in 0..stride {
                let pair = Pair {
                    offset: offset as u16,
                    len,
                };
                entries.push((window(&pattern.bytes, offset, window_len), pair));
            }
        }
        entries.sort_unstable();
        entries.dedup();
        let mut windows = entries.iter().map(|e| e.0).collect::<Vec<_>>();
        windows.dedup();
        let slot_count = (windows.len() * SLOTS_PER_WINDOW)
            .next_power_of_two()
            .max(16);
        let shift = 64 - slot_count.trailing_zeros();
        // INVARIANT: as in `Engine::slot`.
        let slot_of = |w: u64| (w.wrapping_mul(SLOT_MUL) >> shift) as usize;
        // Pairs per slot, without repeats (two windows in one slot may list the same pair).
        let mut by_slot: Vec<(usize, Pair)> = entries
            .iter()
            .map(|&(w, pair)| (slot_of(w), pair))
            .collect();
        by_slot.sort_unstable();
        by_slot.dedup();
        let mut slots = vec![Slot::default(); slot_count];
        let mut pairs = Vec::with_capacity(by_slot.len());
        for (slot, pair) in by_slot {
            let Some(place) = slots.get_mut(slot) else {
                continue;
            };
            if place.count == 0 {
                place.start = u32::try_from(pairs.len()).map_err(|_| TooLarge)?;
            }
            place.count += 1;
            pairs.push(pair);
        }
        let per_window = slots
            .iter()
            .map(|s| s.count as usize)
            .max()
            .unwrap_or(1)
            .max(1);
        // An empty slot reads pairs like a full one, from a place spread over the pairs as the
        // full slots' starts are.
        let spread = pairs.len().max(1);
        for (index, slot) in slots.iter_mut().enumerate() {
            if slot.count == 0 {
                let start = index.wrapping_mul(SPREAD_MUL) % spread;
                slot.start = u32::try_from(start).map_err(|_| TooLarge)?;
            }
        }
        // Borrowed pairs past the last slot: copies from the front.
        let tail: Vec<Pair> = pairs.iter().cycle().take(per_window).copied().collect();
        pairs.extend(tail);
        if pairs.is_empty() {
            pairs.push(Pair::default());
        }
        if slots.len() * size_of::<Slot>() + pairs.len() * size_of::<Pair>() > MAX_TABLE_BYTES {
            return Err(TooLarge);
        }
        Ok(WindowTable {
            slots,
            shift,
            pairs,
            per_window,
        })
    }
}

/// The `len` (at most 8) bytes at `at` as a little-endian word; the bytes past the end read as 0
/// (the search only reads windows that fit).
#[inline]
fn window(bytes: &[u8], at: usize, len: usize) -> u64 {
    let mut array = [0u8; WINDOW];
    if len == WINDOW
        && let Some(slice) = bytes.get(at..at + WINDOW)
    {
        array.copy_from_slice(slice);
    } else {
        for (i, place) in array.iter_mut().enumerate().take(len) {
            *place = bytes.get(at + i).copied().unwrap_or(0);
        }
    }
    u64::from_le_bytes(array)
}

/// Work counting for the tests: pairs evaluated, buckets read and byte comparisons, so a test
/// can show that a near miss costs what any window costs. Compiled out of the binary.
pub(crate) mod work {
    /// Pairs evaluated.
    pub(crate) const PAIRS: usize = 0;
    /// Buckets read after a set bit.
    pub(crate) const BUCKETS: usize = 1;
    /// Byte comparisons after a fingerprint found.
    pub(crate) const COMPARES: usize = 2;

    #[cfg(test)]
    thread_local! {
        static DONE: std::cell::Cell<[u64; 3]> = const { std::cell::Cell::new([0; 3]) };
    }

    /// Adds `units` to this thread's count of `what`.
    #[inline]
    pub(crate) fn count(what: usize, units: u64) {
        #[cfg(test)]
        DONE.with(|done| {
            let mut counts = done.get();
            if let Some(count) = counts.get_mut(what) {
                *count += units;
            }
            done.set(counts);
        });
        #[cfg(not(test))]
        let _ = (what, units);
    }

    /// This thread's counts so far, by `PAIRS`, `BUCKETS`, `COMPARES`.
    #[cfg(test)]
    pub(crate) fn done() -> [u64; 3] {
        DONE.with(std::cell::Cell::get)
    }
}

/// The longest window read at each sampled position.
const WINDOW: usize = 8;
/// The longest stride: more would grow the window table for little gain.
const MAX_STRIDE: usize = 32;
/// Slots per distinct window: sparser means fewer windows sharing a slot.
const SLOTS_PER_WINDOW: usize = 2;
/// Bits per pattern in the bitset: a hash that is no pattern's finds its bit set about once in
/// this many.
const BITS_PER_PATTERN: usize = 64;
/// Any table larger than this refuses the secrets (only with megabytes of patterns).
const MAX_TABLE_BYTES: usize = 256 << 20;
/// Bases tried before giving up on keeping the patterns' fingerprints apart.
const BASE_ATTEMPTS: usize = 8;
const SLOT_MUL: u64 = 0x9E37_79B9_7F4A_7C15;
const PLACE_MUL: u64 = 0xC2B2_AE3D_27D4_EB4F;
const LEN_MUL: u64 = 0x1656_67B1_9E37_79F9;
const SPREAD_MUL: usize = 0x9E37_79B1;
/// The hold is a multiple of this many bytes.
const HOLD_GRANULE: usize = 64;
