//! Loads the bytes of a declaration file into a small YAML tree that remembers where every node
//! sits, refusing the YAML features that make a file mean something other than what it shows.
//!
//! First step of every file load (policy, aliases); the typed readers in `fields` walk the tree.
//! Refused here: files over the size bound, non-UTF-8 bytes, anchors and aliases, explicit tags,
//! duplicate keys, nesting past the depth bound, flow collections past the lookahead bound, and
//! anything but exactly one document. Errors never quote the file's text: a scalar could be a
//! secret pasted into the wrong file.
//!
//! Memory: yaml-rust2's scanner holds every token of a flow collection (`[a, b, ...]`,
//! `{a: 1, ...}`) until the collection ends, since the whole collection could still turn out to be
//! a mapping key; about 80 bytes a token, so a 4 MiB file of `[a,a,a,...]` cost over 300 MB before
//! one event came out. The parser's input counts the flow indicators it reads past the last event
//! and ends early at [`MAX_FLOW_LOOKAHEAD`], which bounds that queue; the file is then refused
//! (E016), never loaded as the prefix read.

use std::cell::Cell;
use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::rc::Rc;

use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::{Marker, ScanError, TScalarStyle};

use crate::diagnostic::{Code, Diagnostic, Findings, Pos};

/// Largest declaration file the loader reads: 4 MiB.
pub const MAX_FILE_BYTES: usize = 4 * 1024 * 1024;

/// Deepest nesting of sequences and mappings the loader accepts.
pub const MAX_DEPTH: usize = 32;

/// The most flow indicators (`,`, `[`, `]`, `{`, `}`) the parser may read ahead of the last event
/// it produced. A flow collection is read whole before any of it comes out, so this bounds the
/// entries of one flow collection (and the commas of a comment or a quoted scalar, which no
/// declaration needs by the thousand); block lists (`- item` per line) have no such bound.
pub const MAX_FLOW_LOOKAHEAD: usize = 16_384;

/// A node of the loaded document with its position. Kept small (32 bytes, with no spare
/// capacity in its text or lists): an agent-written file can hold two million of them.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Node {
    pub(crate) kind: NodeKind,
    line: u32,
    column: u32,
}

/// What a node holds.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum NodeKind {
    /// A scalar with its text; `plain` is false for quoted and block scalars, which are always
    /// strings.
    Scalar {
        text: Box<str>,
        plain: bool,
    },
    Seq(Box<[Node]>),
    /// Entries in file order; keys are scalars (anything else was refused while loading).
    Map(Box<[(Node, Node)]>),
}

/// A scalar resolved by the YAML 1.2 core schema.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Value<'a> {
    Null,
    Bool(bool),
    Int(i128),
    Float,
    Str(&'a str),
}

// === impl Node ===

impl Node {
    fn new(kind: NodeKind, pos: Pos) -> Node {
        // A file holds at most `MAX_FILE_BYTES` characters, so its lines and columns fit.
        let narrow = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        Node {
            kind,
            line: narrow(pos.line),
            column: narrow(pos.column),
        }
    }

    /// Where the node starts.
    pub(crate) fn pos(&self) -> Pos {
        Pos {
            line: self.line as usize,
            column: self.column as usize,
        }
    }

    /// The core-schema reading of a scalar node; `None` for sequences and mappings.
    pub(crate) fn value(&self) -> Option<Value<'_>> {
        match &self.kind {
            NodeKind::Scalar { text, plain: false } => Some(Value::Str(text)),
            NodeKind::Scalar { text, plain: true } => Some(resolve_plain(text)),
            NodeKind::Seq(_) | NodeKind::Map(_) => None,
        }
    }

    /// A word for the kind of value this node holds, for "expected X, found Y" messages.
    pub(crate) fn kind_name(&self) -> &'static str {
        match self.value() {
            None => match self.kind {
                NodeKind::Seq(_) => "a list",
                _ => "a mapping",
            },
            Some(Value::Null) => "nothing (null)",
            Some(Value::Bool(_)) => "a boolean",
            Some(Value::Int(_)) => "an integer",
            Some(Value::Float) => "a decimal number",
            Some(Value::Str(_)) => "a string",
        }
    }
}

/// Loads one YAML document. On failure returns every load-level problem found.
pub(crate) fn load(bytes: &[u8]) -> Result<Node, Findings> {
    let one = |d: Diagnostic| {
        let mut findings = Findings::default();
        findings.push(d);
        findings
    };
    if bytes.len() > MAX_FILE_BYTES {
        return Err(one(Diagnostic::new(
            Code::FileTooLarge,
            Pos::START,
            "",
            format!(
                "file is {} bytes, more than the {} bytes a declaration file may hold; split it or \
                 remove unused entries",
                bytes.len(),
                MAX_FILE_BYTES
            ),
        )));
    }
    let text = match std::str::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => {
            return Err(one(Diagnostic::new(
                Code::NotUtf8,
                pos_of_byte(bytes, e.valid_up_to()),
                "",
                "file is not valid UTF-8 here; save it as UTF-8",
            )));
        }
    };
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);

    let mut builder = Builder::default();
    let meter = Rc::new(Lookahead::default());
    let mut parser = Parser::new(Input {
        chars: text.chars(),
        meter: Rc::clone(&meter),
    });
    let fed = feed(&mut parser, &mut builder, &meter);
    if meter.cut.get() {
        // The parser saw the input end early: whatever it made of the prefix (an error, or even
        // a well-formed document) is not the file.
        builder.problems.push(Diagnostic::new(
            Code::FlowTooLong,
            builder.last_pos,
            "",
            format!(
                "a flow list or mapping (`[...]`, `{{...}}`) after this point holds more than \
                 {MAX_FLOW_LOOKAHEAD} commas and brackets; write long lists as block lists, one \
                 `- item` per line"
            ),
        ));
        return Err(builder.problems);
    }
    if let Err(e) = fed {
        // Past the depth bound the scanner's own recursion limit may fire: the depth problem
        // already explains it.
        if !builder.too_deep {
            if e.info().contains("recursion limit") {
                builder.problems.push(too_deep(pos_of_marker(*e.marker())));
            } else {
                builder.problems.push(syntax_error(&e));
            }
        }
        return Err(builder.problems);
    }
    if builder.documents != 1 {
        let message = if builder.documents == 0 {
            "file holds no YAML document; write the declarations as a mapping"
        } else {
            "file holds more than one YAML document; keep one and remove the `---` separators"
        };
        builder.problems.push(Diagnostic::new(
            Code::NotSingleDocument,
            builder.second_document.unwrap_or(Pos::START),
            "",
            message,
        ));
    }
    if !builder.problems.is_empty() {
        return Err(builder.problems);
    }
    match builder.root {
        Some(root) => Ok(root),
        None => Err(one(Diagnostic::new(
            Code::NotSingleDocument,
            Pos::START,
            "",
            "file holds no YAML document; write the declarations as a mapping",
        ))),
    }
}

/// Passes the parser's events to the builder one by one. Not `Parser::load`: that recurses once
/// per level of nesting, and a block sequence (`- - - - x`) has no depth bound in yaml-rust2, so a
/// deep file would overflow the stack. Stops at the depth bound: the rest cannot be read anyway.
fn feed(
    parser: &mut Parser<Input<'_>>,
    builder: &mut Builder,
    meter: &Lookahead,
) -> Result<(), ScanError> {
    loop {
        let (event, mark) = parser.next_token()?;
        if meter.cut.get() {
            // What comes out now is the queue the cut input left; the file is refused anyway, at
            // the last event before it.
            return Ok(());
        }
        meter.emitted.set(meter.read.get());
        let end = event == Event::StreamEnd;
        builder.on_event(event, mark);
        if end || builder.too_deep {
            return Ok(());
        }
    }
}

/// The text as the parser reads it, one character at a time, metered by [`Lookahead`].
struct Input<'a> {
    chars: std::str::Chars<'a>,
    meter: Rc<Lookahead>,
}

/// How far the parser has read ahead of what it produced, in flow indicators.
#[derive(Default)]
struct Lookahead {
    /// Flow indicators read so far.
    read: Cell<usize>,
    /// `read` when the last event came out.
    emitted: Cell<usize>,
    /// Set once the input was ended early: past [`MAX_FLOW_LOOKAHEAD`].
    cut: Cell<bool>,
}

impl Iterator for Input<'_> {
    type Item = char;

    fn next(&mut self) -> Option<char> {
        if self.meter.cut.get() {
            return None;
        }
        let c = self.chars.next()?;
        if matches!(c, ',' | '[' | ']' | '{' | '}') {
            let read = self.meter.read.get() + 1;
            self.meter.read.set(read);
            if read - self.meter.emitted.get() > MAX_FLOW_LOOKAHEAD {
                self.meter.cut.set(true);
                return None;
            }
        }
        Some(c)
    }
}

/// Receives parser events and builds the tree with an explicit stack, so depth is bounded by
/// `MAX_DEPTH` rather than by the thread's stack.
#[derive(Default)]
struct Builder {
    stack: Vec<Frame>,
    root: Option<Node>,
    documents: usize,
    second_document: Option<Pos>,
    problems: Findings,
    /// Set once the depth bound is hit: later events are ignored.
    too_deep: bool,
    /// Depth of containers skipped after the depth bound was hit.
    skipped_depth: usize,
    /// Hashes the keys of every mapping for the duplicate check.
    hasher: RandomState,
    /// Where the last event was: what an E016 points at.
    last_pos: Pos,
}

enum Frame {
    Seq {
        pos: Pos,
        items: Vec<Node>,
    },
    Map {
        pos: Pos,
        entries: Vec<(Node, Node)>,
        pending_key: Option<Node>,
        /// The keyed hash of every scalar key so far, with the index of its entry: one lookup
        /// per key keeps the duplicate check linear. A randomly keyed SipHash (std's
        /// `RandomState`), never an unkeyed hash: whoever wrote the file chose the keys.
        seen: HashMap<u64, usize>,
    },
}

impl MarkedEventReceiver for Builder {
    fn on_event(&mut self, ev: Event, mark: Marker) {
        let pos = pos_of_marker(mark);
        self.last_pos = pos;
        if self.too_deep {
            match ev {
                Event::SequenceStart(..) | Event::MappingStart(..) => self.skipped_depth += 1,
                Event::SequenceEnd | Event::MappingEnd => {
                    self.skipped_depth = self.skipped_depth.saturating_sub(1);
                }
                _ => {}
            }
            return;
        }
        match ev {
            Event::DocumentStart => {
                self.documents += 1;
                if self.documents == 2 {
                    self.second_document = Some(pos);
                }
            }
            Event::Alias(_) => {
                self.problems
                    .push(anchor_problem(pos, "an alias (`*name`)"));
                // Stand-in so the surrounding structure stays well formed.
                self.push_node(Node::new(
                    NodeKind::Scalar {
                        text: Box::from(""),
                        plain: true,
                    },
                    pos,
                ));
            }
            Event::Scalar(text, style, anchor, tag) => {
                self.check_anchor_and_tag(pos, anchor, tag.is_some());
                let plain = matches!(style, TScalarStyle::Plain);
                self.push_node(Node::new(
                    NodeKind::Scalar {
                        text: text.into_boxed_str(),
                        plain,
                    },
                    pos,
                ));
            }
            Event::SequenceStart(anchor, tag) => {
                self.check_anchor_and_tag(pos, anchor, tag.is_some());
                if self.enter(pos) {
                    self.stack.push(Frame::Seq {
                        pos,
                        items: Vec::new(),
                    });
                }
            }
            Event::MappingStart(anchor, tag) => {
                self.check_anchor_and_tag(pos, anchor, tag.is_some());
                if self.enter(pos) {
                    self.stack.push(Frame::Map {
                        pos,
                        entries: Vec::new(),
                        pending_key: None,
                        seen: HashMap::new(),
                    });
                }
            }
            Event::SequenceEnd | Event::MappingEnd => {
                // Boxed slices drop the lists' spare capacity (up to half of each).
                let node = match self.stack.pop() {
                    Some(Frame::Seq { pos, items }) => {
                        Node::new(NodeKind::Seq(items.into_boxed_slice()), pos)
                    }
                    Some(Frame::Map { pos, entries, .. }) => {
                        Node::new(NodeKind::Map(entries.into_boxed_slice()), pos)
                    }
                    None => return,
                };
                self.push_node(node);
            }
            Event::Nothing | Event::StreamStart | Event::StreamEnd | Event::DocumentEnd => {}
        }
    }
}

// === impl Builder ===

impl Builder {
    fn check_anchor_and_tag(&mut self, pos: Pos, anchor: usize, tagged: bool) {
        if anchor != 0 {
            self.problems
                .push(anchor_problem(pos, "an anchor (`&name`)"));
        }
        if tagged {
            self.problems.push(Diagnostic::new(
                Code::YamlTag,
                pos,
                "",
                "explicit YAML tags are not allowed; remove the `!tag` and write the value plainly",
            ));
        }
    }

    /// Whether one more level of nesting is within bounds; records the problem when it is not.
    fn enter(&mut self, pos: Pos) -> bool {
        if self.stack.len() >= MAX_DEPTH {
            self.problems.push(too_deep(pos));
            self.too_deep = true;
            self.skipped_depth = 1;
            return false;
        }
        true
    }

    fn push_node(&mut self, node: Node) {
        match self.stack.last_mut() {
            None => {
                if self.documents <= 1 {
                    self.root = Some(node);
                }
            }
            Some(Frame::Seq { items, .. }) => items.push(node),
            Some(Frame::Map {
                entries,
                pending_key,
                seen,
                ..
            }) => match pending_key.take() {
                None => {
                    match &node.kind {
                        NodeKind::Scalar { text, .. } => {
                            let hash = self.hasher.hash_one(text);
                            let first = match seen.get(&hash) {
                                None => {
                                    seen.insert(hash, entries.len());
                                    None
                                }
                                Some(&i) => entries
                                    .get(i)
                                    .filter(|(k, _)| same_key(k, &node))
                                    // Two keys with one 64-bit hash: look the slow way.
                                    .or_else(|| entries.iter().find(|(k, _)| same_key(k, &node)))
                                    .map(|(k, _)| k.pos()),
                            };
                            if let Some(first) = first {
                                if self.problems.shows(node.pos()) {
                                    // The key is not quoted: it could be a secret pasted in
                                    // the wrong place. Both positions say which one it is.
                                    self.problems.push(Diagnostic::new(
                                        Code::DuplicateKey,
                                        node.pos(),
                                        "",
                                        format!(
                                            "this key appears twice in this mapping (first at \
                                             line {}, column {}); keep one",
                                            first.line, first.column
                                        ),
                                    ));
                                } else {
                                    self.problems.skip(Code::DuplicateKey);
                                }
                            }
                        }
                        NodeKind::Seq(_) | NodeKind::Map(_) => {
                            self.problems.push(Diagnostic::new(
                                Code::WrongType,
                                node.pos(),
                                "",
                                "a mapping key must be a plain name, not a list or mapping",
                            ));
                        }
                    }
                    *pending_key = Some(node);
                }
                Some(key) => entries.push((key, node)),
            },
        }
    }
}

/// Whether two keys are the same: the same text, however each was quoted.
fn same_key(a: &Node, b: &Node) -> bool {
    match (&a.kind, &b.kind) {
        (NodeKind::Scalar { text: x, .. }, NodeKind::Scalar { text: y, .. }) => x == y,
        _ => false,
    }
}

fn too_deep(pos: Pos) -> Diagnostic {
    Diagnostic::new(
        Code::TooDeep,
        pos,
        "",
        format!(
            "nesting deeper than {MAX_DEPTH} levels; declaration files are shallow, check the indentation"
        ),
    )
}

fn anchor_problem(pos: Pos, what: &str) -> Diagnostic {
    Diagnostic::new(
        Code::YamlAnchor,
        pos,
        "",
        format!(
            "{what} is not allowed: anchors make a rule mean more than it shows; write the value out"
        ),
    )
}

fn syntax_error(e: &ScanError) -> Diagnostic {
    // The scanner's marker column counts from 0; its message may quote one character of the
    // input, which is dropped here.
    let mark = e.marker();
    let pos = Pos {
        line: mark.line().max(1),
        column: mark.col() + 1,
    };
    let info = e.info();
    let info = match info.find('`') {
        Some(i) => info[..i].trim_end_matches([' ', ':']),
        None => info,
    };
    Diagnostic::new(
        Code::YamlSyntax,
        pos,
        "",
        format!("invalid YAML ({info}); check the indentation, quotes and brackets around here"),
    )
}

fn pos_of_marker(mark: Marker) -> Pos {
    Pos {
        line: mark.line().max(1),
        column: mark.col() + 1,
    }
}

/// Line and column (in characters) of a byte offset that ends valid UTF-8.
fn pos_of_byte(bytes: &[u8], offset: usize) -> Pos {
    let prefix = bytes.get(..offset).unwrap_or(bytes);
    let line = prefix.iter().filter(|&&b| b == b'\n').count() + 1;
    let line_start = prefix
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1);
    let column = std::str::from_utf8(prefix.get(line_start..).unwrap_or_default())
        .map_or(1, |s| s.chars().count() + 1);
    Pos { line, column }
}

/// Reads a plain scalar by the YAML 1.2 core schema.
fn resolve_plain(text: &str) -> Value<'_> {
    match text {
        "" | "~" | "null" | "Null" | "NULL" => return Value::Null,
        "true" | "True" | "TRUE" => return Value::Bool(true),
        "false" | "False" | "FALSE" => return Value::Bool(false),
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" | "-.inf" | "-.Inf" | "-.INF"
        | ".nan" | ".NaN" | ".NAN" => return Value::Float,
        _ => {}
    }
    if let Some(int) = parse_int(text) {
        return Value::Int(int);
    }
    if looks_like_float(text) {
        return Value::Float;
    }
    Value::Str(text)
}

fn parse_int(text: &str) -> Option<i128> {
    let (negative, digits) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let (radix, digits) = if let Some(hex) = digits.strip_prefix("0x") {
        (16, hex)
    } else if let Some(oct) = digits.strip_prefix("0o") {
        (8, oct)
    } else {
        (10, digits)
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    // Out-of-range integers still read as integers; bounds are the typed reader's concern.
    let value = i128::from_str_radix(digits, radix).unwrap_or(i128::MAX);
    Some(if negative { -value } else { value })
}

fn looks_like_float(text: &str) -> bool {
    let body = text.strip_prefix(['-', '+']).unwrap_or(text);
    let (mantissa, exponent) = match body.find(['e', 'E']) {
        Some(i) => (&body[..i], Some(&body[i + 1..])),
        None => (body, None),
    };
    let mut parts = mantissa.splitn(2, '.');
    let whole = parts.next().unwrap_or_default();
    let frac = parts.next();
    let digits_ok = |s: &str| s.chars().all(|c| c.is_ascii_digit());
    let mantissa_ok = match frac {
        Some(f) => digits_ok(whole) && digits_ok(f) && !(whole.is_empty() && f.is_empty()),
        None => !whole.is_empty() && digits_ok(whole),
    };
    let exponent_ok = exponent.is_none_or(|e| {
        let e = e.strip_prefix(['-', '+']).unwrap_or(e);
        !e.is_empty() && digits_ok(e)
    });
    mantissa_ok && exponent_ok && (frac.is_some() || exponent.is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn codes(bytes: &[u8]) -> Vec<(&'static str, usize, usize)> {
        match load(bytes) {
            Ok(_) => Vec::new(),
            Err(ds) => ds
                .into_sorted()
                .iter()
                .map(|d| (d.code.as_str(), d.line, d.column))
                .collect(),
        }
    }

    #[test]
    fn positions_are_one_based() {
        let root = load(b"a: 1\nbb:\n  - x\n").unwrap();
        let NodeKind::Map(entries) = &root.kind else {
            panic!("not a map")
        };
        assert_eq!(entries[0].0.pos(), Pos { line: 1, column: 1 });
        assert_eq!(entries[0].1.pos(), Pos { line: 1, column: 4 });
        let NodeKind::Seq(items) = &entries[1].1.kind else {
            panic!("not a seq")
        };
        assert_eq!(items[0].pos(), Pos { line: 3, column: 5 });
    }

    #[test]
    fn core_schema_resolution() {
        let root =
            load(b"[1, '1', 0x1F, -3, true, 'true', ~, 1.5, 1e3, abc, .inf, 2130706433]").unwrap();
        let NodeKind::Seq(items) = &root.kind else {
            panic!("not a seq")
        };
        let values: Vec<_> = items.iter().map(|n| n.value().unwrap()).collect();
        assert_eq!(
            values,
            vec![
                Value::Int(1),
                Value::Str("1"),
                Value::Int(31),
                Value::Int(-3),
                Value::Bool(true),
                Value::Str("true"),
                Value::Null,
                Value::Float,
                Value::Float,
                Value::Str("abc"),
                Value::Float,
                Value::Int(2130706433),
            ]
        );
    }

    #[test]
    fn refuses_anchors_aliases_and_tags() {
        assert_eq!(
            codes(b"a: &x [1]\nb: *x\n"),
            vec![("E004", 1, 7), ("E004", 2, 4)]
        );
        assert_eq!(codes(b"a: !!str 1\n"), vec![("E007", 1, 10)]);
    }

    #[test]
    fn refuses_duplicate_keys() {
        assert_eq!(codes(b"a: 1\nb: 2\na: 3\n"), vec![("E005", 3, 1)]);
    }

    #[test]
    fn refuses_deep_nesting_without_recursing() {
        let deep = "[".repeat(10_000) + &"]".repeat(10_000);
        assert_eq!(codes(deep.as_bytes())[0].0, "E006");
        let block = "a:\n".to_owned()
            + &(1..40)
                .map(|i| format!("{}- x:\n", "  ".repeat(i)))
                .collect::<String>();
        assert_eq!(codes(block.as_bytes()), vec![("E006", 17, 36)]);
    }

    #[test]
    fn refuses_a_flow_collection_past_the_lookahead_bound_never_its_prefix() {
        let n = MAX_FLOW_LOOKAHEAD;
        // A flow list inside a flow mapping is read whole before any of it comes out (the
        // scanner keeps every token). Within the bound: loaded.
        let within = format!("{{x: [{}a]}}\n", "a,".repeat(n / 2 - 8));
        assert_eq!(codes(within.as_bytes()), vec![]);
        // Past it: refused (E016), and nothing else is said about the file.
        let past = format!("{{x: [{}a]}}\n", "a,".repeat(n + 1));
        assert_eq!(codes(past.as_bytes()), vec![("E016", 1, 1)]);
        // Never loaded as the prefix read, even when that prefix is a whole document.
        let comment = format!("{{x: 1}} # {}\n", ",".repeat(n + 10));
        assert_eq!(codes(comment.as_bytes()), vec![("E016", 1, 1)]);
        // Lists read in pieces (block lists, or a flow list as a block mapping's value) have no
        // such bound.
        let block = format!("x:\n{}", "  - a\n".repeat(n * 2));
        assert_eq!(codes(block.as_bytes()), vec![]);
        let flow = format!("x: [{}a]\n", "a,".repeat(n * 2));
        assert_eq!(codes(flow.as_bytes()), vec![]);
    }

    #[test]
    fn nodes_stay_small() {
        assert!(std::mem::size_of::<Node>() <= 32);
    }

    #[test]
    fn refuses_non_utf8_with_position() {
        assert_eq!(codes(b"a: 1\nb: x\xff\n"), vec![("E002", 2, 5)]);
    }

    #[test]
    fn refuses_big_files() {
        let big = vec![b'#'; MAX_FILE_BYTES + 1];
        assert_eq!(codes(&big), vec![("E001", 1, 1)]);
    }

    #[test]
    fn refuses_empty_and_multi_document_files() {
        assert_eq!(codes(b""), vec![("E008", 1, 1)]);
        assert_eq!(codes(b"# only a comment\n"), vec![("E008", 1, 1)]);
        assert_eq!(codes(b"a: 1\n---\nb: 2\n"), vec![("E008", 2, 1)]);
    }

    #[test]
    fn syntax_errors_have_positions_and_do_not_quote_input() {
        let ds = load(b"a: 1\nb: [1, 2\nc: \"secret-canary\n")
            .unwrap_err()
            .into_sorted();
        assert_eq!(ds.len(), 1);
        assert_eq!(ds[0].code, Code::YamlSyntax);
        assert!(!ds[0].message.contains("secret-canary"));
        let ds = load(b"a: 1\n\tb: secret-canary\n")
            .unwrap_err()
            .into_sorted();
        assert!(
            !ds[0].message.contains("secret-canary"),
            "{}",
            ds[0].message
        );
    }
}
