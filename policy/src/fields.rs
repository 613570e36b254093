//! Typed reading of the loaded YAML tree: mappings with known fields, lists, strings, integers
//! and booleans, each failure recorded as a finding at the node's position.
//!
//! Sits between `yaml` (which builds the tree) and the file formats (`policy`, `aliases`), which
//! say what each field means. Messages name the field and the expected kind of value; they never
//! quote a scalar from the file.

use std::collections::HashMap;

use crate::diagnostic::{Code, Diagnostic, Findings, Pos};
use crate::yaml::{Node, NodeKind, Value};

/// Where findings go, and the rule (or alias) they are attributed to.
#[derive(Debug)]
pub(crate) struct Sink<'a> {
    pub(crate) diagnostics: &'a mut Findings,
    pub(crate) subject: Option<String>,
}

// === impl Sink ===

impl Sink<'_> {
    pub(crate) fn push(&mut self, diagnostic: Diagnostic) {
        self.diagnostics
            .push(diagnostic.in_rule(self.subject.as_deref()));
    }

    /// Whether a finding about `node` could still be shown (see `Findings::shows`).
    pub(crate) fn shows(&self, node: &Node) -> bool {
        self.diagnostics.shows(node.pos())
    }

    /// Counts a finding that `shows` said cannot be shown.
    pub(crate) fn skip(&mut self, code: Code) {
        self.diagnostics.skip(code);
    }

    pub(crate) fn error(
        &mut self,
        code: Code,
        node: &Node,
        path: &str,
        message: impl Into<String>,
    ) {
        self.push(Diagnostic::new(code, node.pos(), path, message));
    }

    /// Records a "wrong type" finding: `expected a list of strings, found an integer`.
    pub(crate) fn wrong_type(&mut self, node: &Node, path: &str, expected: &str) {
        let found = node.kind_name();
        self.error(
            Code::WrongType,
            node,
            path,
            format!("expected {expected}, found {found}; write {expected} here"),
        );
    }
}

/// The fields of one mapping, taken one by one; whatever is left is reported as unknown.
#[derive(Debug)]
pub(crate) struct MapReader<'n> {
    node: &'n Node,
    entries: &'n [(Node, Node)],
    taken: Vec<bool>,
    path: String,
}

// === impl MapReader ===

impl<'n> MapReader<'n> {
    /// Reads `node` as a mapping, or records a wrong-type finding.
    pub(crate) fn new(node: &'n Node, path: &str, sink: &mut Sink<'_>) -> Option<Self> {
        match &node.kind {
            NodeKind::Map(entries) => Some(MapReader {
                node,
                entries,
                taken: vec![false; entries.len()],
                path: path.to_owned(),
            }),
            _ => {
                sink.wrong_type(node, path, "a mapping");
                None
            }
        }
    }

    /// The mapping node itself.
    pub(crate) fn node(&self) -> &'n Node {
        self.node
    }

    /// The value of field `key`, marking it as known.
    pub(crate) fn take(&mut self, key: &str) -> Option<&'n Node> {
        let index = self
            .entries
            .iter()
            .position(|(k, _)| scalar_text(k) == Some(key))?;
        if let Some(slot) = self.taken.get_mut(index) {
            *slot = true;
        }
        self.entries.get(index).map(|(_, v)| v)
    }

    /// Reports later findings relative to `path` (a rule's fields, once its id is known).
    pub(crate) fn rebase(&mut self, path: &str) {
        path.clone_into(&mut self.path);
    }

    /// The path of field `key` inside this mapping.
    pub(crate) fn path_of(&self, key: &str) -> String {
        join(&self.path, key)
    }

    /// Records every field not taken as unknown, suggesting the closest of `known`.
    pub(crate) fn finish(self, known: &[&str], sink: &mut Sink<'_>) {
        let listed = known.join(", ");
        for ((key, _), taken) in self.entries.iter().zip(&self.taken) {
            if *taken {
                continue;
            }
            if !sink.shows(key) {
                sink.skip(Code::UnknownField);
                continue;
            }
            let text = scalar_text(key).unwrap_or_default();
            let close = closest(text, known);
            // A key is quoted only when it is a typo of a known field: a short lowercase word a
            // few edits from a public name. Anything else could be a secret pasted as a key.
            let quoted = close.is_some() && is_field_name(text);
            let suggestion = close
                .map(|s| format!("did you mean `{s}`?"))
                .unwrap_or_else(|| format!("known fields: {listed}"));
            let message = if quoted {
                format!("unknown field `{text}`; {suggestion}")
            } else {
                format!("unknown field; {suggestion}")
            };
            let path = if quoted {
                join(&self.path, text)
            } else {
                self.path.clone()
            };
            sink.error(Code::UnknownField, key, &path, message);
        }
    }
}

/// How the field that names an entry (a rule's `id`, an alias's `name`) is checked.
#[derive(Debug)]
pub(crate) struct EntryKey {
    /// The field: `id` or `name`.
    pub(crate) field: &'static str,
    /// The grammar of a valid value.
    pub(crate) is_valid: fn(&str) -> bool,
    /// The message when the field is missing.
    pub(crate) missing: &'static str,
    /// The code and message when the value is outside the grammar.
    pub(crate) invalid: (Code, &'static str),
    /// The code for a value used by an earlier entry, what to say and how to fix it.
    pub(crate) duplicate: (Code, &'static str, &'static str),
}

/// Reads the field that names an entry: required, within its grammar, and unique in the file
/// (`seen` remembers where each value first appeared). Returns the value when it is valid, even
/// if repeated, so later findings can be attributed to it.
pub(crate) fn entry_key(
    map: &mut MapReader<'_>,
    key: &EntryKey,
    seen: &mut HashMap<String, Pos>,
    sink: &mut Sink<'_>,
) -> Option<String> {
    let Some(node) = map.take(key.field) else {
        sink.error(Code::MissingField, map.node(), &map.path, key.missing);
        return None;
    };
    match node.value() {
        Some(Value::Str(text)) if (key.is_valid)(text) => {
            if let Some(first) = seen.get(text) {
                let (code, what, fix) = key.duplicate;
                let message = format!("{what} at line {}; {fix}", first.line);
                sink.diagnostics.push(
                    Diagnostic::new(code, node.pos(), key.field, message).in_rule(Some(text)),
                );
            } else {
                seen.insert(text.to_owned(), node.pos());
            }
            Some(text.to_owned())
        }
        _ => {
            let (code, message) = key.invalid;
            sink.error(code, node, &map.path_of(key.field), message);
            None
        }
    }
}

/// Reads a field that may be a scalar (a one-item list) or a list of scalars.
pub(crate) fn list(node: &Node) -> Vec<(usize, &Node)> {
    match &node.kind {
        NodeKind::Seq(items) => items.iter().enumerate().collect(),
        _ => vec![(0, node)],
    }
}

/// The path of item `index` of a list at `path`.
pub(crate) fn item_path(path: &str, index: usize, node: &Node) -> String {
    if matches!(node.kind, NodeKind::Seq(_)) {
        format!("{path}[{index}]")
    } else {
        path.to_owned()
    }
}

/// Reads a string; records a wrong-type finding otherwise.
pub(crate) fn string<'n>(node: &'n Node, path: &str, sink: &mut Sink<'_>) -> Option<&'n str> {
    match node.value() {
        Some(Value::Str(s)) => Some(s),
        _ => {
            sink.wrong_type(node, path, "a string");
            None
        }
    }
}

/// Reads an integer; records a wrong-type finding otherwise.
pub(crate) fn integer(node: &Node, path: &str, sink: &mut Sink<'_>) -> Option<i128> {
    match node.value() {
        Some(Value::Int(i)) => Some(i),
        _ => {
            sink.wrong_type(node, path, "an integer");
            None
        }
    }
}

/// Reads a boolean; records a wrong-type finding otherwise.
pub(crate) fn boolean(node: &Node, path: &str, sink: &mut Sink<'_>) -> Option<bool> {
    match node.value() {
        Some(Value::Bool(b)) => Some(b),
        _ => {
            sink.wrong_type(node, path, "true or false");
            None
        }
    }
}

/// `a.b`, or `b` when `a` is empty.
pub(crate) fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

/// Whether a key has the shape of a field name: a short lowercase word.
fn is_field_name(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 32
        && text.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
}

fn scalar_text(node: &Node) -> Option<&str> {
    match &node.kind {
        NodeKind::Scalar { text, .. } => Some(text),
        _ => None,
    }
}

/// The known name closest to `text` by edit distance, when it is close enough to be a typo.
pub(crate) fn closest<'k>(text: &str, known: &[&'k str]) -> Option<&'k str> {
    // Distances cost length squared: a long key is no typo of a short name anyway.
    if text.len() > 64 {
        return None;
    }
    let lowered = text.to_ascii_lowercase();
    let chars = lowered.chars().count();
    known
        .iter()
        .filter_map(|k| {
            let limit = (k.len() / 3).max(1);
            // The distance is at least the difference in length: skip names that cannot be
            // close enough, so a file of many unknown keys costs no matrix per key and name.
            if chars.abs_diff(k.len()) > limit {
                return None;
            }
            let d = edit_distance(&lowered, &k.to_ascii_lowercase());
            (d <= limit).then_some((d, *k))
        })
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// Optimal-string-alignment distance: edits, with a swap of neighbours counting as one.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let width = b.len() + 1;
    let mut d = vec![0usize; (a.len() + 1) * width];
    let at = |i: usize, j: usize| i * width + j;
    for i in 0..=a.len() {
        d[at(i, 0)] = i;
    }
    for j in 0..=b.len() {
        d[at(0, j)] = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[at(i - 1, j)] + 1)
                .min(d[at(i, j - 1)] + 1)
                .min(d[at(i - 1, j - 1)] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[at(i - 2, j - 2)] + 1);
            }
            d[at(i, j)] = best;
        }
    }
    d[at(a.len(), b.len())]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggests_close_names_only() {
        let known = [
            "agent", "alias", "scheme", "host", "port", "method", "path", "tool",
        ];
        assert_eq!(closest("hots", &known), Some("host"));
        assert_eq!(closest("methods", &known), Some("method"));
        assert_eq!(closest("Agent", &known), Some("agent"));
        assert_eq!(closest("zzzzzz", &known), None);
        assert_eq!(closest("efect", &["effect"]), Some("effect"));
    }
}
