//! A strict JSON tokenizer that reports the string tokens a placeholder could sit in, with their
//! raw byte ranges, so substitution can splice values into the body and forward every other byte
//! as it came.
//!
//! The body is read by the rule of [`json_start`], which the MCP `tools/call` check follows too:
//! one optional UTF-8 byte order mark, then one or more JSON texts (JSON Lines), each with its
//! own root for the pointers.
//!
//! Strict means RFC 8259 with no extensions: the body is UTF-8; values are objects, arrays,
//! strings, numbers, `true`, `false` and `null`; strings hold no raw control character and only
//! the escapes `\" \\ \/ \b \f \n \r \t \uXXXX`, with UTF-16 surrogates in pairs; numbers have no
//! leading zeros, `+` or bare `.`; nesting stops at
//! [`MAX_DEPTH`]. Objects are not built, so duplicate keys are not looked at (see the module
//! header of `placeholder`): every value a pointer names is its place, whichever duplicate a
//! receiver keeps. Iterative: no recursion however deep the input.
//!
//! While it reads, the tokenizer follows the aliases' JSON Pointers ([`BodyPlaces`]) down the
//! body: each value is given the trie node its path leads to, if any. A member name is decoded
//! (once) only when a pointer goes on below its object, so a body no pointer reaches costs no
//! decoding at all.

use std::ops::Range;

use mint_policy::body::{BodyPlaces, JsonNode, is_json_whitespace, json_start};

/// A string token that may hold a placeholder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct StringToken {
    /// The bytes between the quotes.
    pub(crate) content: Range<usize>,
    /// Whether it is an object key.
    pub(crate) is_key: bool,
    /// The place a pointer names here (`None`: no pointer leads to this value; always `None`
    /// for a key).
    pub(crate) node: Option<JsonNode>,
}

/// The string tokens of `body` that contain `{`, `%` or `\u` (the only ways to spell a
/// placeholder's first byte), in order, each with the place `places` names there; `None` when
/// `body` is not a JSON body as [`json_start`] defines it (one optional byte order mark, then
/// one or more strict JSON texts: the MCP check's reading).
pub(crate) fn candidate_strings(body: &[u8], places: &BodyPlaces) -> Option<Vec<StringToken>> {
    strings(body, places, false)
}

/// Every string token of `body`, as [`candidate_strings`] reports them: with shaped
/// placeholders, any string may hold one.
pub(crate) fn all_strings(body: &[u8], places: &BodyPlaces) -> Option<Vec<StringToken>> {
    strings(body, places, true)
}

fn strings(body: &[u8], places: &BodyPlaces, every: bool) -> Option<Vec<StringToken>> {
    std::str::from_utf8(body).ok()?;
    let mut tokenizer = Tokenizer {
        bytes: body,
        pos: json_start(body),
        strings: Vec::new(),
        places,
        value_node: places.root(),
        every,
    };
    tokenizer.text()?;
    Some(tokenizer.strings)
}

struct Tokenizer<'a> {
    bytes: &'a [u8],
    pos: usize,
    strings: Vec<StringToken>,
    places: &'a BodyPlaces,
    /// The place of the value about to be read.
    value_node: Option<JsonNode>,
    /// Whether every string is reported, not only those with `{`, `%` or `\u`.
    every: bool,
}

/// An open container: whether it is an object, its place, and (arrays) the next index.
struct Frame {
    is_object: bool,
    node: Option<JsonNode>,
    next_index: usize,
}

impl Tokenizer<'_> {
    /// One JSON text: a value between optional whitespace.
    fn text(&mut self) -> Option<()> {
        let mut stack: Vec<Frame> = Vec::new();
        self.whitespace();
        'value: loop {
            // A value starts here.
            let first = self.peek()?;
            match first {
                b'{' => {
                    // Empty containers count toward the depth too, as in serde_json.
                    if stack.len() >= MAX_DEPTH {
                        return None;
                    }
                    self.pos += 1;
                    self.whitespace();
                    if self.peek()? == b'}' {
                        self.pos += 1;
                    } else {
                        let node = self.value_node;
                        stack.push(Frame {
                            is_object: true,
                            node,
                            next_index: 0,
                        });
                        self.member_key(node)?;
                        continue 'value;
                    }
                }
                b'[' => {
                    if stack.len() >= MAX_DEPTH {
                        return None;
                    }
                    self.pos += 1;
                    self.whitespace();
                    if self.peek()? == b']' {
                        self.pos += 1;
                    } else {
                        let node = self.value_node;
                        self.value_node = node.and_then(|n| self.places.element(n, 0));
                        stack.push(Frame {
                            is_object: false,
                            node,
                            next_index: 1,
                        });
                        continue 'value;
                    }
                }
                b'"' => {
                    self.string(false)?;
                }
                b't' => self.literal(b"true")?,
                b'f' => self.literal(b"false")?,
                b'n' => self.literal(b"null")?,
                b'-' | b'0'..=b'9' => self.number()?,
                _ => return None,
            }
            // A top-level number or literal ends at whitespace or the end: `truenull` and `01`
            // are not two texts.
            if stack.is_empty()
                && matches!(first, b't' | b'f' | b'n' | b'-' | b'0'..=b'9')
                && self.peek().is_some_and(|b| !is_json_whitespace(b))
            {
                return None;
            }
            // A value ended: close containers until one continues with `,`.
            loop {
                self.whitespace();
                let Some(frame) = stack.last_mut() else {
                    if self.pos == self.bytes.len() {
                        return Some(());
                    }
                    // Another JSON text (JSON Lines): its pointers start at the root again.
                    self.value_node = self.places.root();
                    continue 'value;
                };
                match (self.peek()?, frame.is_object) {
                    (b',', true) => {
                        let node = frame.node;
                        self.pos += 1;
                        self.whitespace();
                        self.member_key(node)?;
                        continue 'value;
                    }
                    (b',', false) => {
                        let index = frame.next_index;
                        frame.next_index = index.saturating_add(1);
                        self.value_node = frame.node.and_then(|n| self.places.element(n, index));
                        self.pos += 1;
                        self.whitespace();
                        continue 'value;
                    }
                    (b'}', true) | (b']', false) => {
                        self.pos += 1;
                        stack.pop();
                    }
                    _ => return None,
                }
            }
        }
    }

    /// `"key"`, whitespace, `:`, whitespace; the member's value gets its place below `object`.
    fn member_key(&mut self, object: Option<JsonNode>) -> Option<()> {
        if self.peek()? != b'"' {
            return None;
        }
        let content = self.string(true)?;
        self.value_node = match object {
            Some(node) if self.places.has_children(node) => {
                // The token was checked strictly: it parses as a JSON string (escapes undone).
                let quoted = self.bytes.get(content.start - 1..content.end + 1)?;
                let name: String = serde_json::from_slice(quoted).ok()?;
                self.places.member(node, &name)
            }
            _ => None,
        };
        self.whitespace();
        if self.peek()? != b':' {
            return None;
        }
        self.pos += 1;
        self.whitespace();
        Some(())
    }

    /// A string token starting at its opening quote; returns the range of its content.
    fn string(&mut self, is_key: bool) -> Option<Range<usize>> {
        self.pos += 1;
        let start = self.pos;
        let mut candidate = self.every;
        loop {
            // Strings are mostly short: a table lookup per byte beats calling `memchr`. Locals
            // keep the position in a register.
            let bytes = self.bytes;
            let mut pos = self.pos;
            let class = loop {
                let class = STRING_BYTES[usize::from(*bytes.get(pos)?)];
                if class > CANDIDATE {
                    break class;
                }
                candidate |= class == CANDIDATE;
                pos += 1;
            };
            self.pos = pos;
            match class {
                QUOTE => break,
                CONTROL => return None,
                _ => {}
            }
            match *self.bytes.get(self.pos + 1)? {
                b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.pos += 2,
                b'u' => {
                    candidate = true;
                    let code = self.hex4(self.pos + 2)?;
                    self.pos += 6;
                    if (0xD800..0xDC00).contains(&code) {
                        // A high surrogate must be followed by a low one.
                        if self.bytes.get(self.pos..self.pos + 2)? != b"\\u" {
                            return None;
                        }
                        let low = self.hex4(self.pos + 2)?;
                        if !(0xDC00..0xE000).contains(&low) {
                            return None;
                        }
                        self.pos += 6;
                    } else if (0xDC00..0xE000).contains(&code) {
                        return None;
                    }
                }
                _ => return None,
            }
        }
        if candidate {
            self.strings.push(StringToken {
                content: start..self.pos,
                is_key,
                node: if is_key { None } else { self.value_node },
            });
        }
        let content = start..self.pos;
        self.pos += 1;
        Some(content)
    }

    fn hex4(&self, at: usize) -> Option<u32> {
        self.bytes
            .get(at..at + 4)?
            .iter()
            .try_fold(0u32, |acc, &d| {
                let value = char::from(d).to_digit(16)?;
                Some((acc << 4) | value)
            })
    }

    fn number(&mut self) -> Option<()> {
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        match self.peek()? {
            b'0' => self.pos += 1,
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        if self.peek() == Some(b'.') {
            self.pos += 1;
            if !self.peek()?.is_ascii_digit() {
                return None;
            }
            self.digits();
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.pos += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.pos += 1;
            }
            if !self.peek()?.is_ascii_digit() {
                return None;
            }
            self.digits();
        }
        Some(())
    }

    fn digits(&mut self) {
        while self.peek().is_some_and(|b| b.is_ascii_digit()) {
            self.pos += 1;
        }
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        if self.bytes.get(self.pos..self.pos + word.len())? != word {
            return None;
        }
        self.pos += word.len();
        Some(())
    }

    fn whitespace(&mut self) {
        while self.peek().is_some_and(is_json_whitespace) {
            self.pos += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }
}

/// What a byte means inside a string token.
const PLAIN: u8 = 0;
const CANDIDATE: u8 = 1;
const QUOTE: u8 = 2;
const BACKSLASH: u8 = 3;
const CONTROL: u8 = 4;
const STRING_BYTES: [u8; 256] = {
    let mut table = [PLAIN; 256];
    let mut byte = 0;
    while byte < 0x20 {
        table[byte] = CONTROL;
        byte += 1;
    }
    table[b'"' as usize] = QUOTE;
    table[b'\\' as usize] = BACKSLASH;
    table[b'{' as usize] = CANDIDATE;
    table[b'%' as usize] = CANDIDATE;
    table
};

/// The deepest nesting of arrays and objects accepted: 127, as serde_json's default recursion
/// limit of 128 allows.
pub(crate) const MAX_DEPTH: usize = 127;
