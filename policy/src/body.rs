//! Where in a request body each alias's secret may be substituted: the JSON Pointers (RFC 6901)
//! an alias names in its `body` site and the form fields it names in its `form` site, and the
//! compiled view the broker's body scan asks.
//!
//! A placeholder in a body is substituted only at a place its alias names; anywhere else in the
//! body it is inert text, forwarded unchanged (DESIGN.md). [`BodyPlaces`] is a trie of every
//! alias's pointers: the broker's tokenizer walks the body, steps down the trie member by member
//! and element by element, and asks whether the alias of a placeholder names the string value it
//! found. Walking costs one lookup per member or element below a named prefix and nothing
//! elsewhere. Form fields (`application/x-www-form-urlencoded`) are a map from the decoded field
//! name to the aliases that name it: one lookup per field of a form body. Never holds a secret
//! and never quotes the body.

use std::collections::HashMap;
use std::fmt;

use serde::{Serialize, Serializer};

use crate::aliases::AliasFile;

/// The most pointers one alias may name.
pub const MAX_POINTERS: usize = 64;
/// The longest pointer, in bytes.
pub const MAX_POINTER_BYTES: usize = 1024;
/// The most form fields one alias may name.
pub const MAX_FORM_FIELDS: usize = 64;
/// The longest form field name, in bytes.
pub const MAX_FORM_FIELD_BYTES: usize = 256;

/// A JSON Pointer (RFC 6901): `""` (the whole body) or `/` followed by reference tokens separated
/// by `/`, with `~1` for `/` and `~0` for `~` inside a token.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct JsonPointer {
    text: String,
    tokens: Vec<String>,
}

/// Why a pointer was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PointerError {
    /// Not empty, and does not start with `/`.
    #[error("a JSON Pointer starts with `/`, such as `/client_secret`")]
    NoLeadingSlash,
    /// A `~` not followed by `0` or `1`.
    #[error("in a JSON Pointer `~` must be followed by `0` (for `~`) or `1` (for `/`)")]
    BadEscape,
    /// Longer than [`MAX_POINTER_BYTES`].
    #[error("a JSON Pointer is at most 1024 bytes")]
    TooLong,
}

// === impl JsonPointer ===

impl JsonPointer {
    /// Reads a pointer.
    pub fn parse(text: &str) -> Result<JsonPointer, PointerError> {
        if text.len() > MAX_POINTER_BYTES {
            return Err(PointerError::TooLong);
        }
        let Some(rest) = text.strip_prefix('/') else {
            return if text.is_empty() {
                Ok(JsonPointer {
                    text: String::new(),
                    tokens: Vec::new(),
                })
            } else {
                Err(PointerError::NoLeadingSlash)
            };
        };
        let tokens = rest
            .split('/')
            .map(unescape_token)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(JsonPointer {
            text: text.to_owned(),
            tokens,
        })
    }

    /// The pointer as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Its reference tokens, unescaped.
    pub fn tokens(&self) -> &[String] {
        &self.tokens
    }
}

impl fmt::Display for JsonPointer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Serialize for JsonPointer {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.text)
    }
}

fn unescape_token(token: &str) -> Result<String, PointerError> {
    let mut out = String::with_capacity(token.len());
    let mut chars = token.chars();
    while let Some(c) = chars.next() {
        if c == '~' {
            match chars.next() {
                Some('0') => out.push('~'),
                Some('1') => out.push('/'),
                _ => return Err(PointerError::BadEscape),
            }
        } else {
            out.push(c);
        }
    }
    Ok(out)
}

/// The name of a field of an `application/x-www-form-urlencoded` body, as the receiver reads it
/// after decoding (`client_secret`, `client secret` for `client+secret`): 1 to
/// [`MAX_FORM_FIELD_BYTES`] bytes, no control character. Matched byte for byte, case-sensitively,
/// against each field name of a form body once its `+` and `%XX` escapes are undone.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FormField(String);

/// Why a form field name was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FormFieldError {
    /// The empty name.
    #[error(
        "a form field name is not empty; name the field as the receiver reads it, such as `client_secret`"
    )]
    Empty,
    /// Longer than [`MAX_FORM_FIELD_BYTES`].
    #[error("a form field name is at most 256 bytes")]
    TooLong,
    /// A control character (a line break, a tab, NUL...).
    #[error(
        "a form field name holds no control character; write it decoded, as the receiver reads it (`client secret`, not `client+secret` or `client%20secret`)"
    )]
    Control,
}

// === impl FormField ===

impl FormField {
    /// Reads a field name, written decoded.
    pub fn parse(text: &str) -> Result<FormField, FormFieldError> {
        if text.is_empty() {
            return Err(FormFieldError::Empty);
        }
        if text.len() > MAX_FORM_FIELD_BYTES {
            return Err(FormFieldError::TooLong);
        }
        if text.chars().any(char::is_control) {
            return Err(FormFieldError::Control);
        }
        Ok(FormField(text.to_owned()))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for FormField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for FormField {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

/// Undoes the escapes of a form body's field name or value as the WHATWG URL Standard's
/// `application/x-www-form-urlencoded` parser does (Python, Go, Node, Rack, PHP alike): `+` is
/// a space, `%XX` (either hex case) is the byte, and anything else (a `%` without two hex
/// digits included) is itself.
pub fn form_decode(raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len());
    let mut pos = 0;
    while let Some(&byte) = raw.get(pos) {
        let escape = (byte == b'%')
            .then(|| {
                let high = hex_digit(*raw.get(pos + 1)?)?;
                let low = hex_digit(*raw.get(pos + 2)?)?;
                Some((high << 4) | low)
            })
            .flatten();
        match (byte, escape) {
            (_, Some(decoded)) => {
                out.push(decoded);
                pos += 3;
            }
            (b'+', None) => {
                out.push(b' ');
                pos += 1;
            }
            (other, None) => {
                out.push(other);
                pos += 1;
            }
        }
    }
    out
}

fn hex_digit(byte: u8) -> Option<u8> {
    char::from(byte)
        .to_digit(16)
        .and_then(|d| u8::try_from(d).ok())
}

/// The place an alias names, where a placeholder was substituted: what `mint policy explain`
/// shows. Written by the operator in the alias file, so never the agent's text.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum NamedPlace {
    /// A JSON Pointer, as written.
    Pointer(String),
    /// A form field name, decoded.
    FormField(String),
}

impl fmt::Display for NamedPlace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NamedPlace::Pointer(pointer) => write!(f, "JSON Pointer `{pointer}`"),
            NamedPlace::FormField(field) => write!(f, "form field `{field}`"),
        }
    }
}

/// The UTF-8 byte order mark, which a JSON body may start with.
pub const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// Where the JSON texts of a body start: after one UTF-8 byte order mark, if there is one.
///
/// This and [`is_json_whitespace`] are the one rule both of Mint's JSON readers follow, so that
/// the MCP `tools/call` check (which decides the tool the policy matches) and the placeholder
/// scan (which decides where a secret is substituted) read the same body the same way: one
/// optional byte order mark (Python's `utf-8-sig`, Node's `body-parser` and Go's decoders of
/// a stream skip it), then one or more strict JSON texts (RFC 8259), each followed by JSON
/// whitespace, the next text or the end, a top-level number or literal by whitespace or the
/// end (JSON Lines, concatenated JSON: what `json.Decoder` and JSON Lines readers take). Each
/// text's pointers start at its own root.
pub fn json_start(body: &[u8]) -> usize {
    if body.starts_with(UTF8_BOM) {
        UTF8_BOM.len()
    } else {
        0
    }
}

/// Whether `byte` is JSON whitespace (RFC 8259: space, tab, line feed, carriage return).
pub fn is_json_whitespace(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\n' | b'\r')
}

/// A place in the trie of [`BodyPlaces`]: a value a pointer prefix leads to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct JsonNode(usize);

/// The body places of every declared alias, as a trie of their pointers' tokens.
#[derive(Clone, Debug, Default)]
pub struct BodyPlaces {
    /// Node 0 is the root (the whole body); empty when no alias names a JSON Pointer.
    nodes: Vec<TrieNode>,
    /// Each named form field (decoded) with the aliases that name it, sorted.
    form: HashMap<Vec<u8>, Vec<String>>,
}

#[derive(Clone, Debug, Default)]
struct TrieNode {
    children: HashMap<String, usize>,
    /// The aliases whose pointer ends here, sorted.
    aliases: Vec<String>,
    /// The pointer that ends here, as written (pointers are canonical: one spelling per node).
    pointer: Option<String>,
}

// === impl BodyPlaces ===

impl BodyPlaces {
    /// The body places the aliases of `file` name.
    pub fn new(file: &AliasFile) -> BodyPlaces {
        let mut places = BodyPlaces::default();
        for alias in &file.aliases {
            for pointer in &alias.body {
                places.insert(&alias.name, pointer);
            }
            for field in &alias.form {
                places
                    .form
                    .entry(field.as_str().as_bytes().to_vec())
                    .or_default()
                    .push(alias.name.clone());
            }
        }
        for node in &mut places.nodes {
            node.aliases.sort_unstable();
            node.aliases.dedup();
        }
        for aliases in places.form.values_mut() {
            aliases.sort_unstable();
            aliases.dedup();
        }
        places
    }

    fn insert(&mut self, alias: &str, pointer: &JsonPointer) {
        if self.nodes.is_empty() {
            self.nodes.push(TrieNode::default());
        }
        let mut at = 0;
        for token in pointer.tokens() {
            let next = self.nodes.len();
            // INVARIANT: `at` is an index this function pushed.
            let child = *self.nodes[at].children.entry(token.clone()).or_insert(next);
            if child == next {
                self.nodes.push(TrieNode::default());
            }
            at = child;
        }
        self.nodes[at].aliases.push(alias.to_owned());
        self.nodes[at].pointer = Some(pointer.as_str().to_owned());
    }

    /// The whole body's place; `None` when no alias names a body place.
    pub fn root(&self) -> Option<JsonNode> {
        (!self.nodes.is_empty()).then_some(JsonNode(0))
    }

    /// Whether a pointer goes on below `node`: only then are its members' names worth reading.
    pub fn has_children(&self, node: JsonNode) -> bool {
        self.nodes
            .get(node.0)
            .is_some_and(|n| !n.children.is_empty())
    }

    /// The place of the member `name` of the object at `node`.
    pub fn member(&self, node: JsonNode, name: &str) -> Option<JsonNode> {
        self.nodes
            .get(node.0)?
            .children
            .get(name)
            .copied()
            .map(JsonNode)
    }

    /// The place of element `index` of the array at `node` (RFC 6901: the token is the index in
    /// decimal without leading zeros).
    pub fn element(&self, node: JsonNode, index: usize) -> Option<JsonNode> {
        let children = &self.nodes.get(node.0)?.children;
        if children.is_empty() {
            return None;
        }
        children.get(&index.to_string()).copied().map(JsonNode)
    }

    /// Whether `alias` names the value at `node`.
    pub fn names(&self, node: JsonNode, alias: &str) -> bool {
        self.nodes.get(node.0).is_some_and(|n| {
            n.aliases
                .binary_search_by(|a| a.as_str().cmp(alias))
                .is_ok()
        })
    }

    /// Whether any alias names the value at `node`: a malformed placeholder there is refused.
    pub fn is_named(&self, node: JsonNode) -> bool {
        self.nodes
            .get(node.0)
            .is_some_and(|n| !n.aliases.is_empty())
    }

    /// The pointer that names the value at `node`, as written.
    pub fn pointer(&self, node: JsonNode) -> Option<&str> {
        self.nodes.get(node.0)?.pointer.as_deref()
    }

    /// Whether any alias names a form field.
    pub fn has_form_fields(&self) -> bool {
        !self.form.is_empty()
    }

    /// Whether `alias` names the form field called `name` (decoded: [`form_decode`]).
    pub fn names_form_field(&self, name: &[u8], alias: &str) -> bool {
        self.form
            .get(name)
            .is_some_and(|aliases| aliases.binary_search_by(|a| a.as_str().cmp(alias)).is_ok())
    }

    /// Whether any alias names the form field called `name` (decoded): a malformed placeholder
    /// in its value is refused.
    pub fn is_named_form_field(&self, name: &[u8]) -> bool {
        self.form.contains_key(name)
    }
}

/// Where in a body an inert placeholder sat: a place Mint never substitutes for its alias.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum InertPlace {
    /// A string value of a JSON body that is not one of the alias's body places.
    JsonValue,
    /// A member name of a JSON body.
    JsonKey,
    /// The value of a field of a form body that is not one of the alias's form fields (or that
    /// follows a `;` in a named field's value, which some parsers split at).
    FormValue,
    /// A field name of a form body.
    FormKey,
    /// A body that is neither JSON nor a form (by its `Content-Type`, or a JSON body that does
    /// not parse), or one with a content coding.
    Text,
}

// === impl InertPlace ===

impl InertPlace {
    /// Every place, in order.
    pub const ALL: [InertPlace; 5] = [
        InertPlace::JsonValue,
        InertPlace::JsonKey,
        InertPlace::FormValue,
        InertPlace::FormKey,
        InertPlace::Text,
    ];

    /// The place's name in audit records: `json_value`, `json_key`, `form_value`, `form_key` or
    /// `text`.
    pub fn as_str(self) -> &'static str {
        match self {
            InertPlace::JsonValue => "json_value",
            InertPlace::JsonKey => "json_key",
            InertPlace::FormValue => "form_value",
            InertPlace::FormKey => "form_key",
            InertPlace::Text => "text",
        }
    }

    /// The place called `name`.
    pub fn from_name(name: &str) -> Option<InertPlace> {
        InertPlace::ALL
            .into_iter()
            .find(|place| place.as_str() == name)
    }
}

impl std::fmt::Display for InertPlace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
