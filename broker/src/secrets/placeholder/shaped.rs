//! Value-shaped placeholders: the per-alias values derived from each alias's `placeholder` shape,
//! and the one automaton the scanner reads every placeholder spelling with.
//!
//! A value is `HMAC-SHA256(home key, alias name, shape)` expanded into the shape's alphabet, so it
//! is random (the key is 32 random bytes of the home, `placeholder.key`), identical for every
//! process that reads the same home (`mint run`, `mint env`, `mint alias list`, the broker), and
//! stable until the alias's name or shape changes (or the key file is replaced). It is public,
//! like `{{mint:NAME}}`: the agent holds it, and it is never scrubbed from answers. Nothing here
//! touches a secret.
//!
//! [`ShapedPlaceholders`] holds the values and an Aho-Corasick DFA over `{{mint:` and every value;
//! `spelling::events` steps it over the decoded units of a text, so a shaped value is found
//! through the same escapes, in the same parts and with the same raw/escaped distinction as
//! `{{mint:NAME}}`. No value may contain another (checked when built), and none can contain
//! `{{mint:` (shapes hold only unreserved characters), so at most one pattern ends at any unit.

use std::fmt;

use aho_corasick::automaton::Automaton as _;
use aho_corasick::dfa::DFA;
use aho_corasick::{Anchored, Input, MatchKind};
use base64::Engine as _;
use hmac::{Hmac, Mac as _};
use mint_policy::aliases::AliasFile;
use mint_policy::placeholder_shape::{Alphabet, PlaceholderShape};
use sha2::Sha256;
use zeroize::Zeroizing;

use super::spelling::PREFIX;

/// The per-home key shaped placeholders are derived from: 32 random bytes.
#[derive(Clone)]
pub struct PlaceholderKey(Zeroizing<[u8; 32]>);

/// The shaped placeholders of a set of aliases, and the automaton that finds them.
#[derive(Clone, Default)]
pub struct ShapedPlaceholders {
    /// `(alias, value)`, in alias file order; pattern `i + 1` of the automaton is entry `i`.
    values: Vec<(String, String)>,
    /// `{{mint:` and every value; `None` when no alias has a shape.
    automaton: Option<DFA>,
    /// The longest pattern, in bytes.
    longest: usize,
}

/// Why the shaped placeholders could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ShapedError {
    /// One alias's value contains another's (never expected with 128 random bits; refused all
    /// the same, since the scanner could not tell them apart).
    #[error("the placeholders of aliases `{first}` and `{second}` overlap; change one's shape")]
    Overlap {
        /// One alias.
        first: String,
        /// The other.
        second: String,
    },
    /// The automaton could not be built.
    #[error("cannot build the placeholder scanner")]
    Automaton,
}

// === impl PlaceholderKey ===

impl PlaceholderKey {
    /// A key from its bytes.
    pub fn from_bytes(bytes: [u8; 32]) -> PlaceholderKey {
        PlaceholderKey(Zeroizing::new(bytes))
    }

    /// A fresh random key; `None` when the system has no randomness to give.
    pub fn random() -> Option<PlaceholderKey> {
        let mut bytes = Zeroizing::new([0u8; 32]);
        getrandom::fill(bytes.as_mut_slice()).ok()?;
        Some(PlaceholderKey(bytes))
    }

    /// The key's file text: 64 lowercase hex digits and a newline.
    pub fn to_text(&self) -> Zeroizing<String> {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        // Sized for all of it: a string that grew would free an unwiped copy of the key.
        let mut text = Zeroizing::new(String::with_capacity(self.0.len() * 2 + 1));
        for &byte in self.0.iter() {
            text.push(char::from(DIGITS[usize::from(byte >> 4)]));
            text.push(char::from(DIGITS[usize::from(byte & 0xf)]));
        }
        text.push('\n');
        text
    }

    /// Reads the file text written by [`Self::to_text`] (surrounding whitespace ignored).
    pub fn from_text(text: &str) -> Option<PlaceholderKey> {
        let mut bytes = Zeroizing::new([0u8; 32]);
        hex::decode_to_slice(text.trim(), bytes.as_mut_slice()).ok()?;
        Some(PlaceholderKey(bytes))
    }

    /// The value of the placeholder of alias `name` with `shape`.
    pub fn derive(&self, name: &str, shape: &PlaceholderShape) -> String {
        let mut stream = Stream::new(self, name, shape);
        match shape {
            PlaceholderShape::Token {
                prefix,
                length,
                alphabet,
            } => {
                let mut value = prefix.clone();
                while value.len() < *length {
                    value.push(char::from(stream.pick(*alphabet)));
                }
                value
            }
            PlaceholderShape::Jwt => {
                let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
                let jti = b64.encode(stream.bytes::<16>());
                let signature = b64.encode(stream.bytes::<32>());
                let claims = serde_json::json!({ "mint": name, "jti": jti }).to_string();
                format!(
                    "{}.{}.{signature}",
                    b64.encode(JWT_HEADER),
                    b64.encode(claims)
                )
            }
        }
    }
}

impl fmt::Debug for PlaceholderKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PlaceholderKey").finish_non_exhaustive()
    }
}

// === impl ShapedPlaceholders ===

impl ShapedPlaceholders {
    /// The placeholders of every alias of `aliases` that declares a shape.
    pub fn derive(
        key: &PlaceholderKey,
        aliases: &AliasFile,
    ) -> Result<ShapedPlaceholders, ShapedError> {
        let values: Vec<(String, String)> = aliases
            .aliases
            .iter()
            .filter_map(|alias| {
                let shape = alias.placeholder.as_ref()?;
                Some((alias.name.clone(), key.derive(&alias.name, shape)))
            })
            .collect();
        ShapedPlaceholders::from_values(values)
    }

    /// The placeholders given as `(alias, value)` pairs.
    pub fn from_values(values: Vec<(String, String)>) -> Result<ShapedPlaceholders, ShapedError> {
        if values.is_empty() {
            return Ok(ShapedPlaceholders::default());
        }
        for (i, (first, a)) in values.iter().enumerate() {
            for (second, b) in values.iter().skip(i + 1) {
                if a.contains(b.as_str()) || b.contains(a.as_str()) {
                    return Err(ShapedError::Overlap {
                        first: first.clone(),
                        second: second.clone(),
                    });
                }
            }
        }
        let patterns: Vec<&[u8]> = std::iter::once(PREFIX)
            .chain(values.iter().map(|(_, value)| value.as_bytes()))
            .collect();
        let longest = patterns.iter().map(|p| p.len()).max().unwrap_or(0);
        let automaton = DFA::builder()
            .match_kind(MatchKind::Standard)
            .start_kind(aho_corasick::StartKind::Unanchored)
            .build(&patterns)
            .map_err(|_| ShapedError::Automaton)?;
        Ok(ShapedPlaceholders {
            values,
            automaton: Some(automaton),
            longest,
        })
    }

    /// Whether no alias has a shaped placeholder.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The shaped placeholder of `alias`, if it declares a shape.
    pub fn value(&self, alias: &str) -> Option<&str> {
        self.values
            .iter()
            .find(|(name, _)| name == alias)
            .map(|(_, value)| value.as_str())
    }

    /// Every `(alias, value)`.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.values.iter().map(|(a, v)| (a.as_str(), v.as_str()))
    }

    /// The automaton, and the longest pattern; `None` without shaped placeholders.
    pub(crate) fn automaton(&self) -> Option<(&DFA, usize)> {
        self.automaton.as_ref().map(|dfa| (dfa, self.longest))
    }

    /// The alias of automaton pattern `pattern` (pattern 0, `{{mint:`, has none).
    pub(crate) fn alias_of(&self, pattern: usize) -> Option<&str> {
        let index = pattern.checked_sub(1)?;
        self.values.get(index).map(|(alias, _)| alias.as_str())
    }

    /// Whether a value appears raw in `text`.
    pub(crate) fn holds_raw_value(&self, text: &[u8]) -> bool {
        let Some(dfa) = &self.automaton else {
            return false;
        };
        // `{{mint:` (pattern 0) is looked for by the caller's own checks; any match means the
        // text needs the full scan.
        matches!(
            dfa.try_find(&Input::new(text).anchored(Anchored::No)),
            Ok(Some(_))
        )
    }
}

impl fmt::Debug for ShapedPlaceholders {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The values are public, but a Debug line has no use for them.
        f.debug_struct("ShapedPlaceholders")
            .field(
                "aliases",
                &self.values.iter().map(|(a, _)| a).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

/// An HMAC-SHA256 output stream bound to one alias and shape: block `i` is
/// `HMAC(key, "mint-placeholder-v1" 0 name 0 shape 0 i)`.
struct Stream<'k> {
    key: &'k PlaceholderKey,
    message: Vec<u8>,
    counter: u32,
    block: Zeroizing<[u8; 32]>,
    used: usize,
}

impl<'k> Stream<'k> {
    fn new(key: &'k PlaceholderKey, name: &str, shape: &PlaceholderShape) -> Stream<'k> {
        let mut message = b"mint-placeholder-v1\0".to_vec();
        message.extend_from_slice(name.as_bytes());
        message.push(0);
        message.extend_from_slice(shape.as_text().as_bytes());
        message.push(0);
        Stream {
            key,
            message,
            counter: 0,
            block: Zeroizing::new([0; 32]),
            used: 32,
        }
    }

    fn byte(&mut self) -> u8 {
        if self.used == self.block.len() {
            // INVARIANT: HMAC accepts keys of any length.
            #[expect(clippy::expect_used, reason = "HMAC takes a key of any length")]
            let mut mac = Hmac::<Sha256>::new_from_slice(self.key.0.as_slice())
                .expect("HMAC takes a key of any length");
            mac.update(&self.message);
            mac.update(&self.counter.to_be_bytes());
            self.block
                .copy_from_slice(mac.finalize().into_bytes().as_slice());
            self.counter = self.counter.wrapping_add(1);
            self.used = 0;
        }
        let byte = self.block.get(self.used).copied().unwrap_or(0);
        self.used += 1;
        byte
    }

    fn bytes<const N: usize>(&mut self) -> [u8; N] {
        std::array::from_fn(|_| self.byte())
    }

    /// One character of `alphabet`, uniformly: bytes past the largest multiple of its size are
    /// drawn again.
    fn pick(&mut self, alphabet: Alphabet) -> u8 {
        let chars = alphabet.chars();
        let size = chars.len();
        let limit = 256 - 256 % size;
        loop {
            let byte = usize::from(self.byte());
            if byte < limit {
                return chars.get(byte % size).copied().unwrap_or(b'A');
            }
        }
    }
}

/// The JOSE header of a JWT placeholder.
const JWT_HEADER: &str = r#"{"alg":"HS256","typ":"JWT"}"#;

#[cfg(test)]
mod tests;
