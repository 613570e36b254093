//! Writes an audit record as its line: byte for byte what `AuditRecord::to_line` (serde_json)
//! writes, without going through serde.
//!
//! The writer serializes every record on the request's path, so this is the hot part of an
//! audit write after the `write(2)` itself: fields are appended in `Field::ALL` order straight
//! into the line buffer, absent ones left out, strings escaped exactly as serde_json escapes them
//! (`"` and `\`, and control characters, which the field grammars never admit anyway). A property
//! test holds it to serde_json's output for generated records; reading lines back still goes
//! through `mint_policy::audit::parse_record`. Writes only the fields the record type has, so it
//! can no more hold a header value, a query value, a body or a secret than the record can.

use std::ops::Range;

use mint_policy::audit::{AuditRecord, Version};

/// Appends `record` to `out` as one line of compact JSON (no newline), with `prev` as the value
/// of its `prev` field instead of `record.prev` (the writer passes a placeholder to splice).
/// Returns where in `out` the text of the `id` field is (without its quotes).
pub(super) fn encode(record: &AuditRecord, prev: &str, out: &mut Vec<u8>) -> Range<usize> {
    match record.v {
        Version::V1 => out.extend_from_slice(b"{\"v\":1,\"ts\":"),
    }
    string(out, record.ts.as_str());
    out.extend_from_slice(b",\"id\":");
    let id_start = out.len() + 1;
    string(out, record.id.as_str());
    let id = id_start..out.len() - 1;
    out.extend_from_slice(b",\"phase\":");
    string(out, record.phase.as_str());
    optional(
        out,
        b",\"agent\":",
        record.agent.as_ref().map(|v| v.as_str()),
    );
    optional(
        out,
        b",\"capability\":",
        record.capability.as_ref().map(|v| v.as_str()),
    );
    optional(
        out,
        b",\"method\":",
        record.method.as_ref().map(|v| v.as_str()),
    );
    optional(
        out,
        b",\"scheme\":",
        record.scheme.as_ref().map(|v| v.as_str()),
    );
    optional(out, b",\"host\":", record.host.as_ref().map(|v| v.as_str()));
    if let Some(port) = record.port {
        out.extend_from_slice(b",\"port\":");
        number(out, u64::from(port.get()));
    }
    optional(out, b",\"path\":", record.path.as_ref().map(|v| v.as_str()));
    if !record.query_keys.is_empty() {
        out.extend_from_slice(b",\"query_keys\":");
        list(out, record.query_keys.iter().map(|v| v.as_str()));
    }
    if !record.aliases.is_empty() {
        out.extend_from_slice(b",\"aliases\":");
        list(out, record.aliases.iter().map(|v| v.as_str()));
    }
    if !record.skipped.is_empty() {
        out.extend_from_slice(b",\"skipped\":");
        list(out, record.skipped.iter().map(|v| v.as_str()));
    }
    if let Some(count) = record.skipped_count {
        out.extend_from_slice(b",\"skipped_count\":");
        number(out, count);
    }
    optional(
        out,
        b",\"mcp_tool\":",
        record.mcp_tool.as_ref().map(|v| v.as_str()),
    );
    optional(out, b",\"decision\":", record.decision.map(|v| v.as_str()));
    if let Some(rules) = &record.rule {
        out.extend_from_slice(b",\"rule\":");
        list(out, rules.iter().map(|v| v.as_str()));
    }
    if !record.approval.is_empty() {
        out.extend_from_slice(b",\"approval\":");
        list(out, record.approval.iter().map(|v| v.as_str()));
    }
    if !record.approver.is_empty() {
        out.extend_from_slice(b",\"approver\":");
        list(out, record.approver.iter().map(|v| v.as_str()));
    }
    optional(out, b",\"outcome\":", record.outcome.map(|v| v.as_str()));
    if let Some(status) = record.status {
        out.extend_from_slice(b",\"status\":");
        number(out, u64::from(status.get()));
    }
    for (key, value) in [
        (&b",\"bytes_up\":"[..], record.bytes_up),
        (b",\"bytes_down\":", record.bytes_down),
        (b",\"duration_ms\":", record.duration_ms),
        (b",\"requests\":", record.requests),
    ] {
        if let Some(value) = value {
            out.extend_from_slice(key);
            number(out, value);
        }
    }
    optional(out, b",\"ended\":", record.ended.map(|v| v.as_str()));
    if let Some(dropped) = record.dropped {
        out.extend_from_slice(b",\"dropped\":");
        number(out, dropped);
    }
    optional(
        out,
        b",\"reason\":",
        record.reason.as_ref().map(|v| v.as_str()),
    );
    out.extend_from_slice(b",\"prev\":");
    string(out, prev);
    out.push(b'}');
    id
}

fn optional(out: &mut Vec<u8>, key: &[u8], value: Option<&str>) {
    if let Some(value) = value {
        out.extend_from_slice(key);
        string(out, value);
    }
}

fn list<'a>(out: &mut Vec<u8>, items: impl Iterator<Item = &'a str>) {
    out.push(b'[');
    for (index, item) in items.enumerate() {
        if index > 0 {
            out.push(b',');
        }
        string(out, item);
    }
    out.push(b']');
}

/// A JSON string, escaped as serde_json escapes it: `"`, `\` and the control characters below
/// U+0020 (short forms where JSON has one, else `\u00XX` in lowercase hex); everything else,
/// DEL and non-ASCII included, as is.
fn string(out: &mut Vec<u8>, text: &str) {
    out.push(b'"');
    let bytes = text.as_bytes();
    if !any_needs_escape(bytes) {
        out.extend_from_slice(bytes);
    } else {
        let mut start = 0;
        for (at, &byte) in bytes.iter().enumerate() {
            if !needs_escape(byte) {
                continue;
            }
            out.extend_from_slice(bytes.get(start..at).unwrap_or_default());
            match byte {
                b'"' => out.extend_from_slice(b"\\\""),
                b'\\' => out.extend_from_slice(b"\\\\"),
                b'\x08' => out.extend_from_slice(b"\\b"),
                b'\x0c' => out.extend_from_slice(b"\\f"),
                b'\n' => out.extend_from_slice(b"\\n"),
                b'\r' => out.extend_from_slice(b"\\r"),
                b'\t' => out.extend_from_slice(b"\\t"),
                _ => out.extend_from_slice(&[
                    b'\\',
                    b'u',
                    b'0',
                    b'0',
                    hex_digit(byte >> 4),
                    hex_digit(byte & 0x0f),
                ]),
            }
            start = at + 1;
        }
        out.extend_from_slice(bytes.get(start..).unwrap_or_default());
    }
    out.push(b'"');
}

fn needs_escape(byte: u8) -> bool {
    byte < 0x20 || byte == b'"' || byte == b'\\'
}

/// Whether any byte of `bytes` needs escaping. Every field's grammar keeps them out, so this
/// is a check that almost always says no, made eight bytes at a time with the well-known word
/// tricks ("has a byte less than n", "has a zero byte"), which are exact for the question "is
/// there any?". The last partial word is padded with a byte that needs no escaping.
fn any_needs_escape(bytes: &[u8]) -> bool {
    let words = bytes.chunks_exact(8);
    let rest = words.remainder();
    for chunk in words {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        if word_needs_escape(u64::from_ne_bytes(word)) {
            return true;
        }
    }
    if rest.is_empty() {
        return false;
    }
    let mut word = [b'a'; 8];
    if let Some(head) = word.get_mut(..rest.len()) {
        head.copy_from_slice(rest);
    }
    word_needs_escape(u64::from_ne_bytes(word))
}

fn word_needs_escape(word: u64) -> bool {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    let has_zero = |word: u64| word.wrapping_sub(ONES) & !word & HIGHS != 0;
    let has_control = word.wrapping_sub(ONES * 0x20) & !word & HIGHS != 0;
    has_control
        || has_zero(word ^ (ONES * u64::from(b'"')))
        || has_zero(word ^ (ONES * u64::from(b'\\')))
}

fn hex_digit(nibble: u8) -> u8 {
    match nibble {
        0..=9 => b'0' + nibble,
        _ => b'a' + (nibble - 10),
    }
}

/// A decimal integer, as serde_json writes a `u64`.
fn number(out: &mut Vec<u8>, mut value: u64) {
    let mut digits = [0u8; 20];
    let mut start = digits.len();
    loop {
        start -= 1;
        // INVARIANT: a u64 has at most 20 decimal digits, so `start` stays within `digits`.
        if let Some(slot) = digits.get_mut(start) {
            *slot = b'0' + (value % 10) as u8;
        }
        value /= 10;
        if value == 0 || start == 0 {
            break;
        }
    }
    out.extend_from_slice(digits.get(start..).unwrap_or_default());
}

#[cfg(test)]
mod tests {
    use std::fmt;
    use std::num::NonZeroU16;

    use mint_policy::audit::{
        AgentName, AliasName, ApprovalId, Approver, AuditDecision, CapabilityId, ChainHash,
        FieldError, Host, HttpStatus, Method, Outcome, Phase, QueryKey, ReasonCode, RequestId,
        RuleId, Scheme, SkippedQuote, Timestamp, ToolName, TunnelEnd, UrlPath, parse_record,
    };
    use proptest::prelude::*;

    use super::*;

    fn fast(record: &AuditRecord) -> String {
        let mut out = Vec::new();
        let id = encode(record, record.prev.as_str(), &mut out);
        // The id's grammar needs no escaping, so its span holds exactly its text.
        assert_eq!(&out[id], record.id.as_str().as_bytes());
        String::from_utf8(out).unwrap()
    }

    fn serde(record: &AuditRecord) -> String {
        serde_json::to_string(record).unwrap()
    }

    /// A text field from its grammar: `regex` generates candidates, the type's constructor
    /// keeps the valid ones (it is the authority on the grammar, not the regex).
    fn text<T: fmt::Debug>(
        regex: &str,
        new: fn(String) -> Result<T, FieldError>,
    ) -> impl Strategy<Value = T> + use<T> {
        proptest::string::string_regex(regex)
            .unwrap()
            .prop_filter_map("fits the grammar", move |s| new(s).ok())
    }

    /// A path character: printable ASCII but `?` and `#`, with `"` and `\` (which JSON
    /// escapes) as likely as all the others together.
    const PATH_CHAR: &str = r#"(["\\]|[ !"$->@-~])"#;
    /// A query name character: printable ASCII but `&`, `=` and `#`, the same weighting.
    const QUERY_CHAR: &str = r#"(["\\]|[ !"$%'-<>-~])"#;

    fn record() -> impl Strategy<Value = AuditRecord> {
        let head = (
            0u64..=253_402_300_799_999,
            text("[A-Za-z0-9_-]{1,64}", RequestId::new),
            prop_oneof![
                Just(Phase::Decision),
                Just(Phase::Outcome),
                Just(Phase::Event)
            ],
            text("sha256:[0-9a-f]{64}", ChainHash::new),
        );
        let request = (
            proptest::option::of(text("[A-Za-z0-9._-]{1,64}", AgentName::new)),
            proptest::option::of(text("[A-Za-z0-9-]{1,64}", CapabilityId::new)),
            proptest::option::of(text("[A-Za-z0-9!#$%&'*+.^_`|~-]{1,32}", Method::new)),
            proptest::option::of(text("[a-z][a-z0-9+.-]{0,15}", Scheme::new)),
            proptest::option::of(text("[a-z0-9._:-]{1,253}", Host::new)),
            proptest::option::of(1u16..=u16::MAX),
            proptest::option::of(text(&format!("/{PATH_CHAR}{{0,200}}"), UrlPath::new)),
            proptest::collection::vec(text(&format!("{QUERY_CHAR}{{0,40}}"), QueryKey::new), 0..5),
            proptest::collection::vec(text("[a-z0-9][a-z0-9_-]{0,63}", AliasName::new), 0..4),
            proptest::option::of(text(r#"(["\\]|[!-~]){1,128}"#, ToolName::new)),
        );
        let ending = (
            proptest::option::of(prop_oneof![
                Just(AuditDecision::Allow),
                Just(AuditDecision::Deny),
                Just(AuditDecision::Limited),
                Just(AuditDecision::Pending)
            ]),
            proptest::option::of(proptest::collection::vec(
                text("[a-z0-9][a-z0-9._-]{0,63}", RuleId::new),
                0..4,
            )),
            proptest::option::of(prop_oneof![
                Just(Outcome::Completed),
                Just(Outcome::Failed),
                Just(Outcome::Unknown),
                Just(Outcome::Denied),
                Just(Outcome::Limited),
                Just(Outcome::Invalid)
            ]),
            proptest::option::of(100u16..=599),
            proptest::option::of(any::<u64>()),
            proptest::option::of(any::<u64>()),
            proptest::option::of(any::<u64>()),
            proptest::option::of((
                any::<u64>(),
                prop_oneof![
                    Just(TunnelEnd::ClientClosed),
                    Just(TunnelEnd::Shutdown),
                    Just(TunnelEnd::Timeout),
                    Just(TunnelEnd::Error)
                ],
            )),
            proptest::option::of(text(
                "[a-z][a-z0-9]{0,8}(_[a-z0-9]{1,8}){0,3}",
                ReasonCode::new,
            )),
        );
        let skipped = (
            proptest::collection::vec(
                text(
                    "[a-z0-9][a-z0-9_-]{0,63}@(json_value|json_key|form_value|form_key|text)",
                    SkippedQuote::new,
                ),
                0..4,
            ),
            proptest::option::of(any::<u64>()),
        );
        let approvals = (
            proptest::collection::vec(text("(ap|gr)-[a-z0-9]{8}", ApprovalId::new), 0..3),
            proptest::collection::vec(text(r#"[ !#-\[\]-~]{1,96}"#, Approver::new), 0..3),
        );
        (head, request, ending, skipped, approvals).prop_map(
            |((ms, id, phase, prev), request, ending, skipped, approvals)| {
                let ts = Timestamp::from_unix_millis(ms).unwrap();
                let mut record = match phase {
                    Phase::Decision => AuditRecord::decision(ts, id, AuditDecision::Allow, prev),
                    Phase::Outcome => AuditRecord::outcome(ts, id, Outcome::Completed, prev),
                    Phase::Event => AuditRecord::event(ts, id, ReasonCode::new("x").unwrap(), prev),
                };
                let (
                    agent,
                    capability,
                    method,
                    scheme,
                    host,
                    port,
                    path,
                    query_keys,
                    aliases,
                    tool,
                ) = request;
                record.agent = agent;
                record.capability = capability;
                record.method = method;
                record.scheme = scheme;
                record.host = host;
                record.port = port.and_then(NonZeroU16::new);
                record.path = path;
                record.query_keys = query_keys;
                record.aliases = aliases;
                (record.skipped, record.skipped_count) = skipped;
                record.mcp_tool = tool;
                // Any combination, whether or not it fits its phase: the serializer writes what it
                // is given, exactly as serde does.
                let (decision, rule, outcome, status, up, down, duration, tunnel, reason) = ending;
                record.decision = decision;
                record.rule = rule;
                (record.approval, record.approver) = approvals;
                record.outcome = outcome;
                record.status = status.map(|s| HttpStatus::new(s).unwrap());
                record.bytes_up = up;
                record.bytes_down = down;
                record.duration_ms = duration;
                record.requests = tunnel.map(|(requests, _)| requests);
                record.ended = tunnel.map(|(_, ended)| ended);
                // Another independent optional count (an event's), in its place.
                record.dropped = down.map(|n| n ^ 1);
                record.reason = reason;
                record
            },
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1000))]

        #[test]
        fn writes_exactly_the_bytes_serde_writes(record in record()) {
            prop_assert_eq!(fast(&record), serde(&record));
        }

        #[test]
        fn escapes_any_string_as_serde_does(text in any::<String>()) {
            let mut out = Vec::new();
            string(&mut out, &text);
            prop_assert_eq!(
                String::from_utf8(out).unwrap(),
                serde_json::to_string(&text).unwrap()
            );
        }

        #[test]
        fn finds_every_byte_that_needs_escaping(
            bytes in proptest::collection::vec(any::<u8>(), 0..40),
            at in any::<prop::sample::Index>(),
            byte in prop_oneof![0u8..0x20, Just(b'"'), Just(b'\\')],
        ) {
            prop_assert_eq!(
                any_needs_escape(&bytes),
                bytes.iter().any(|&b| needs_escape(b))
            );
            let mut planted = bytes.clone();
            planted.insert(at.index(bytes.len() + 1), byte);
            prop_assert!(any_needs_escape(&planted));
        }

        #[test]
        fn writes_any_number_as_serde_does(value in any::<u64>()) {
            prop_assert_eq!(number_text(value), value.to_string());
        }
    }

    #[test]
    fn example_lines_are_written_back_unchanged() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/audit.log");
        let text = std::fs::read_to_string(path).unwrap();
        let mut checked = 0;
        for line in text.lines() {
            let Ok(record) = parse_record(line) else {
                continue;
            };
            assert_eq!(fast(&record), line);
            checked += 1;
        }
        assert!(checked > 0);
    }

    #[test]
    fn escapes_quotes_and_backslashes_in_paths_and_query_names() {
        let mut record = AuditRecord::decision(
            Timestamp::from_unix_millis(0).unwrap(),
            RequestId::new("r").unwrap(),
            AuditDecision::Allow,
            ChainHash::genesis(),
        );
        record.path = Some(UrlPath::new(r#"/a"b\c"#).unwrap());
        record.query_keys = vec![QueryKey::new(r#"k"\"#).unwrap(), QueryKey::new("").unwrap()];
        record.rule = Some(Vec::new());
        assert_eq!(fast(&record), serde(&record));
        assert!(fast(&record).contains(r#""path":"/a\"b\\c""#));
        assert!(fast(&record).contains(r#""rule":[]"#));
        assert_eq!(parse_record(&fast(&record)).unwrap(), record);
        assert_eq!(number_text(0), "0");
        assert_eq!(number_text(u64::MAX), u64::MAX.to_string());
    }

    fn number_text(value: u64) -> String {
        let mut out = Vec::new();
        number(&mut out, value);
        String::from_utf8(out).unwrap()
    }
}
