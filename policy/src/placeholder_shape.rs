//! Value-shaped placeholders: the `placeholder` shape an alias may declare, so that an SDK or CLI
//! that checks a key's form before sending anything (a literal prefix, a length, a JWT) accepts
//! the placeholder Mint hands the agent.
//!
//! This module only reads and checks a shape; the broker derives the value from it (random,
//! stable until the alias's name or shape changes) and recognizes that value wherever it
//! recognizes `{{mint:NAME}}`. A shaped placeholder is public, like `{{mint:NAME}}`: it is never a
//! secret. Messages never quote the prefix, which an operator might have pasted a key into.

use std::fmt;

use serde::{Serialize, Serializer};

/// The shape of an alias's value-shaped placeholder.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum PlaceholderShape {
    /// A literal prefix followed by random characters of an alphabet, `length` characters in all.
    Token {
        /// The literal prefix (`sk-`, `xoxb-`), `[A-Za-z0-9_.-]`, at most [`MAX_PREFIX`] bytes.
        prefix: String,
        /// The whole length, prefix included.
        length: usize,
        /// The alphabet of the random part.
        alphabet: Alphabet,
    },
    /// A JSON Web Token (`header.claims.signature`, base64url) whose claims name the alias and
    /// carry a random `jti`; its signature is random too.
    Jwt,
}

/// The characters of a shaped placeholder's random part. Every alphabet is made of RFC 3986
/// unreserved characters, so the value is spelled the same raw and in a URL.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Alphabet {
    /// `A-Z a-z 0-9` (the default).
    Base62,
    /// `a-z 0-9`.
    Lower,
    /// `0-9 a-f`.
    Hex,
    /// `A-Z a-z 0-9 - _`.
    Base64url,
}

/// Why a shape was refused; each maps to one finding code.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ShapeError {
    /// Not a shape this version reads (E061).
    #[error("{0}")]
    Invalid(&'static str),
    /// Fewer than [`MIN_RANDOM_BITS`] random bits (E062).
    #[error(
        "the random part carries {bits} bits; a placeholder needs at least {MIN_RANDOM_BITS}, \
         so lengthen it or widen its alphabet"
    )]
    Weak {
        /// The random bits the shape leaves.
        bits: u32,
    },
    /// A prefix that reads as Mint's own syntax or tokens (E063).
    #[error(
        "a placeholder prefix may not start with `mint`: Mint's placeholders and capability \
         tokens (`mint_cap_`) are spelled that way; use the prefix the client checks for"
    )]
    Reserved,
}

/// The fewest random bits a shaped placeholder may carry: enough that no upstream answer, no
/// agent and no other key can produce it by accident.
pub const MIN_RANDOM_BITS: u32 = 128;

/// The longest prefix.
pub const MAX_PREFIX: usize = 32;

/// The longest token-shaped placeholder.
pub const MAX_LENGTH: usize = 512;

/// The random characters of a JWT placeholder's `jti` claim (base64url, 132 bits).
pub const JWT_JTI_CHARS: usize = 22;

/// The random characters of a JWT placeholder's signature (base64url of 32 bytes).
pub const JWT_SIGNATURE_CHARS: usize = 43;

// === impl PlaceholderShape ===

impl PlaceholderShape {
    /// Reads the command-line form: `jwt`, or `PREFIX:LENGTH[:ALPHABET]` (`sk-:48`,
    /// `xoxb-:56:lower`; an empty prefix is `:40`).
    pub fn parse(text: &str) -> Result<PlaceholderShape, ShapeError> {
        if text == "jwt" {
            return Ok(PlaceholderShape::Jwt);
        }
        let mut parts = text.split(':');
        let (Some(prefix), Some(length)) = (parts.next(), parts.next()) else {
            return Err(ShapeError::Invalid(
                "a placeholder shape is `jwt` or `PREFIX:LENGTH[:ALPHABET]`, such as `sk-:48`",
            ));
        };
        let alphabet = match parts.next() {
            None => Alphabet::Base62,
            Some(name) => Alphabet::parse(name).ok_or(ShapeError::Invalid(ALPHABETS))?,
        };
        if parts.next().is_some() {
            return Err(ShapeError::Invalid(
                "a placeholder shape is `jwt` or `PREFIX:LENGTH[:ALPHABET]`, such as `sk-:48`",
            ));
        }
        let length = length
            .parse::<usize>()
            .map_err(|_| ShapeError::Invalid(LENGTHS))?;
        PlaceholderShape::token(prefix, length, alphabet)
    }

    /// A token shape, checked: prefix grammar, length, randomness, reserved prefixes.
    pub fn token(
        prefix: &str,
        length: usize,
        alphabet: Alphabet,
    ) -> Result<PlaceholderShape, ShapeError> {
        if prefix.len() > MAX_PREFIX || !prefix.bytes().all(is_prefix_byte) {
            return Err(ShapeError::Invalid(PREFIXES));
        }
        if length > MAX_LENGTH || length <= prefix.len() {
            return Err(ShapeError::Invalid(LENGTHS));
        }
        if prefix.to_ascii_lowercase().starts_with("mint") {
            return Err(ShapeError::Reserved);
        }
        let shape = PlaceholderShape::Token {
            prefix: prefix.to_owned(),
            length,
            alphabet,
        };
        let bits = shape.random_bits();
        if bits < MIN_RANDOM_BITS {
            return Err(ShapeError::Weak { bits });
        }
        Ok(shape)
    }

    /// How many random bits a value of this shape carries (rounded down).
    pub fn random_bits(&self) -> u32 {
        match self {
            PlaceholderShape::Token {
                prefix,
                length,
                alphabet,
            } => {
                let chars = length.saturating_sub(prefix.len());
                let bits = (chars as f64) * f64::from(alphabet.size()).log2();
                // Lengths are at most `MAX_LENGTH`, so the product fits.
                bits.floor() as u32
            }
            PlaceholderShape::Jwt => {
                u32::try_from((JWT_JTI_CHARS + JWT_SIGNATURE_CHARS) * 6).unwrap_or(u32::MAX)
            }
        }
    }

    /// The command-line form, which is also what the broker derives the value from: `jwt` or
    /// `PREFIX:LENGTH:ALPHABET`.
    pub fn as_text(&self) -> String {
        match self {
            PlaceholderShape::Token {
                prefix,
                length,
                alphabet,
            } => format!("{prefix}:{length}:{}", alphabet.as_str()),
            PlaceholderShape::Jwt => "jwt".to_owned(),
        }
    }
}

impl fmt::Display for PlaceholderShape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.as_text())
    }
}

impl Serialize for PlaceholderShape {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

// === impl Alphabet ===

impl Alphabet {
    /// Reads `base62`, `lower`, `hex` or `base64url`.
    pub fn parse(text: &str) -> Option<Alphabet> {
        Some(match text {
            "base62" => Alphabet::Base62,
            "lower" => Alphabet::Lower,
            "hex" => Alphabet::Hex,
            "base64url" => Alphabet::Base64url,
            _ => return None,
        })
    }

    /// Its name in the file.
    pub fn as_str(self) -> &'static str {
        match self {
            Alphabet::Base62 => "base62",
            Alphabet::Lower => "lower",
            Alphabet::Hex => "hex",
            Alphabet::Base64url => "base64url",
        }
    }

    /// Its characters.
    pub fn chars(self) -> &'static [u8] {
        match self {
            Alphabet::Base62 => b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
            Alphabet::Lower => b"abcdefghijklmnopqrstuvwxyz0123456789",
            Alphabet::Hex => b"0123456789abcdef",
            Alphabet::Base64url => {
                b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
            }
        }
    }

    /// How many characters it has.
    pub fn size(self) -> u32 {
        // At most 64 characters.
        u32::try_from(self.chars().len()).unwrap_or(u32::MAX)
    }
}

/// Whether a prefix may hold `byte`: RFC 3986 unreserved characters except `~`, so the value
/// reads the same in a header, a URL, a JSON string and a form field.
fn is_prefix_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'_' | b'.' | b'-')
}

const PREFIXES: &str = "a placeholder prefix is at most 32 characters of A-Z, a-z, 0-9, `_`, `.` \
                        and `-`, such as `sk-` or `xoxb-`";
const LENGTHS: &str = "a placeholder length counts the prefix too and is an integer longer than \
                       the prefix and at most 512";
const ALPHABETS: &str = "a placeholder alphabet is `base62` (the default), `lower`, `hex` or \
                         `base64url`";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_line_forms() {
        assert_eq!(
            PlaceholderShape::parse("sk-:48").unwrap().as_text(),
            "sk-:48:base62"
        );
        assert_eq!(
            PlaceholderShape::parse("xoxb-:60:lower").unwrap().as_text(),
            "xoxb-:60:lower"
        );
        assert_eq!(
            PlaceholderShape::parse(":40:hex").unwrap().as_text(),
            ":40:hex"
        );
        assert_eq!(
            PlaceholderShape::parse("jwt").unwrap(),
            PlaceholderShape::Jwt
        );
        for bad in [
            "",
            "sk-",
            "sk-:x",
            "sk-:48:base10",
            "sk-:48:hex:1",
            "{{mint:x}}:80",
        ] {
            assert!(
                matches!(PlaceholderShape::parse(bad), Err(ShapeError::Invalid(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn randomness_is_counted() {
        // 45 base62 characters: 267 bits.
        assert_eq!(
            PlaceholderShape::parse("sk-:48").unwrap().random_bits(),
            267
        );
        // 32 hex characters are exactly 128 bits; 31 are not enough.
        assert!(PlaceholderShape::parse(":32:hex").is_ok());
        assert_eq!(
            PlaceholderShape::parse(":31:hex"),
            Err(ShapeError::Weak { bits: 124 })
        );
        assert!(matches!(
            PlaceholderShape::parse("sk-:24"),
            Err(ShapeError::Weak { .. })
        ));
        assert!(PlaceholderShape::Jwt.random_bits() >= MIN_RANDOM_BITS);
    }

    #[test]
    fn mint_prefixes_are_reserved() {
        for reserved in ["mint_cap_:80", "MINT-:80", "mint:80"] {
            assert_eq!(
                PlaceholderShape::parse(reserved),
                Err(ShapeError::Reserved),
                "{reserved}"
            );
        }
    }

    #[test]
    fn errors_never_quote_the_prefix() {
        let pasted = "ghp_CANARY0123456789abcdef";
        for text in [
            format!("{pasted}:20"),
            format!("{pasted}:9999"),
            format!("{pasted}~:80"),
        ] {
            let error = PlaceholderShape::parse(&text).unwrap_err().to_string();
            assert!(!error.contains("CANARY"), "{error}");
        }
    }
}
