//! Where in a request body each alias's secret may be substituted: the JSON Pointers (RFC 6901)
//! an alias names in its `body` site, and the compiled view the broker's body scan asks.
//!
//! A placeholder in a body is substituted only at a place its alias names; anywhere else in the
//! body it is inert text, forwarded unchanged (DESIGN.md). [`BodyPlaces`] is a trie of every
//! alias's pointers: the broker's tokenizer walks the body, steps down the trie member by member
//! and element by element, and asks whether the alias of a placeholder names the string value it
//! found. Walking costs one lookup per member or element below a named prefix and nothing
//! elsewhere. Never holds a secret and never quotes the body.

use std::collections::HashMap;
use std::fmt;

use serde::{Serialize, Serializer};

use crate::aliases::AliasFile;

/// The most pointers one alias may name.
pub const MAX_POINTERS: usize = 64;
/// The longest pointer, in bytes.
pub const MAX_POINTER_BYTES: usize = 1024;

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

/// A place in the trie of [`BodyPlaces`]: a value a pointer prefix leads to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct JsonNode(usize);

/// The body places of every declared alias, as a trie of their pointers' tokens.
#[derive(Clone, Debug, Default)]
pub struct BodyPlaces {
    /// Node 0 is the root (the whole body); empty when no alias names a body place.
    nodes: Vec<TrieNode>,
}

#[derive(Clone, Debug, Default)]
struct TrieNode {
    children: HashMap<String, usize>,
    /// The aliases whose pointer ends here, sorted.
    aliases: Vec<String>,
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
        }
        for node in &mut places.nodes {
            node.aliases.sort_unstable();
            node.aliases.dedup();
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
}

/// Where in a body an inert placeholder sat: a place Mint never substitutes for its alias.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum InertPlace {
    /// A string value of a JSON body that is not one of the alias's body places.
    JsonValue,
    /// A member name of a JSON body.
    JsonKey,
    /// A body that is not JSON (by its `Content-Type` or because it does not parse), or one
    /// with a content coding.
    Text,
}

// === impl InertPlace ===

impl InertPlace {
    /// Every place, in order.
    pub const ALL: [InertPlace; 3] = [InertPlace::JsonValue, InertPlace::JsonKey, InertPlace::Text];

    /// The place's name in audit records: `json_value`, `json_key` or `text`.
    pub fn as_str(self) -> &'static str {
        match self {
            InertPlace::JsonValue => "json_value",
            InertPlace::JsonKey => "json_key",
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
