//! The audit record: one line of Mint's JSON Lines audit log, its typed fields, its strict parser
//! and the hash that chains each line to the one before it.
//!
//! The broker builds records (a `decision` before forwarding, an `outcome` after, an `event` for
//! broker events), writes `to_line()` and chains lines with `chain_hash`; `mint audit` and
//! `mint-mcp`'s `audit_tail` read lines back with `parse_record`. The record has no field for a
//! header value, a query value, a body or a token, so none can be written. A `RecordError` never
//! carries any text or number from the line it rejects: only a column and a kind of problem.
//! This module performs no I/O and reads no clock: timestamps are passed in.
//!
//! Shape rules, checked by `AuditRecord::check` and by `parse_record`:
//!
//! - Every record: `v`, `ts`, `id`, `phase` and `prev` are required. The request fields `agent`,
//!   `capability`, `method`, `scheme`, `host`, `port`, `path`, `query_keys`, `aliases`,
//!   `skipped`, `skipped_count` and `mcp_tool` are optional in every phase.
//! - `decision`: requires `decision`, and `reason` unless the decision is `allow`. May carry
//!   `approval` and `approver` (a held request's approvals and who decided them; no other phase
//!   carries them). May carry
//!   `rule`: absent when no policy ran (the request was refused before, e.g. a bad capability),
//!   `[]` when the policy's default decided. Refuses `outcome`, `status`, `bytes_up`,
//!   `bytes_down`, `duration_ms`, `requests` and `ended`.
//! - `outcome`: requires `outcome`, `status` when the outcome is `completed`, and `reason`
//!   otherwise. May carry `status`, `bytes_up`, `bytes_down`, `duration_ms`, `requests`, `ended`,
//!   `reason`; `requests` and `ended` (a closed intercepted tunnel, reason `tunnel_closed`) come
//!   together, except that a WebSocket's outcome (status 101) carries `ended` alone. Refuses
//!   `decision` and `rule`.
//! - `event`: requires `reason`. May carry `dropped` (how many records the broker could not copy
//!   to its stdout, reason `audit_stdout_dropped`; no other phase carries it). Refuses
//!   `decision`, `rule`, `outcome`, `status`, `bytes_up`, `bytes_down`, `duration_ms`,
//!   `requests` and `ended`.
//!
//! Parsing is strict: one JSON object on one line (a CR or LF anywhere is refused, so a CRLF log
//! must be converted first), no duplicate or unknown field, no `null`, every value of the type
//! and grammar its field documents. JSON whitespace other than CR and LF is accepted between
//! tokens, and fields may come in any order; `to_line` writes them compactly in the order of
//! `Field::ALL`.

use std::fmt;
use std::num::NonZeroU16;

use serde::{Serialize, Serializer};
use sha2::{Digest, Sha256};

/// The longest line `parse_record` reads, in bytes. Longer lines are refused before parsing.
pub const MAX_LINE_BYTES: usize = 64 * 1024;

/// The deepest nesting of arrays and objects `parse_record` reads. A record nests 2 deep (the
/// object and its lists); the margin lets a wrongly nested list be reported as an invalid value.
pub const MAX_DEPTH: usize = 4;

/// The most names `query_keys` may hold.
pub const MAX_QUERY_KEYS: usize = 64;

/// The most names `aliases` may hold.
pub const MAX_ALIASES: usize = 64;

/// The most entries `skipped` may hold; `skipped_count` counts every inert placeholder.
pub const MAX_SKIPPED: usize = 16;

/// The most ids `approval` may hold (one per held tool call of a request).
pub const MAX_APPROVALS: usize = 64;

/// The most names `approver` may hold.
pub const MAX_APPROVERS: usize = 8;

/// The most rule ids `rule` may hold. A writer with more deciding rules keeps the first ones.
pub const MAX_RULE_IDS: usize = 256;

/// The `prev` value of the first line of a log: `sha256:` and 64 zeros.
pub const GENESIS_PREV: &str =
    "sha256:0000000000000000000000000000000000000000000000000000000000000000";

/// The name of one field of the record. A closed set: errors name fields only through it, so an
/// unknown key from a line can never appear in a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Field {
    /// `v`: the record format version, always 1.
    V,
    /// `ts`: when the record was made.
    Ts,
    /// `id`: the request id (or event id) the record belongs to.
    Id,
    /// `phase`: `decision`, `outcome` or `event`.
    Phase,
    /// `agent`: the capability's agent name.
    Agent,
    /// `capability`: the capability id, never the token.
    Capability,
    /// `method`: the HTTP method as requested.
    Method,
    /// `scheme`: the upstream scheme.
    Scheme,
    /// `host`: the canonical upstream host.
    Host,
    /// `port`: the upstream port.
    Port,
    /// `path`: the canonical upstream path, without the query.
    Path,
    /// `query_keys`: the names of the query parameters, never their values.
    QueryKeys,
    /// `aliases`: the aliases whose placeholders the request holds.
    Aliases,
    /// `skipped`: where the body quoted placeholders Mint forwarded as text (`alias@place`).
    Skipped,
    /// `skipped_count`: how many placeholders the body quoted as text, malformed ones included.
    SkippedCount,
    /// `mcp_tool`: the MCP tool called (JSON-RPC `tools/call` `params.name`).
    McpTool,
    /// `decision`: `allow`, `deny` or `limited`.
    Decision,
    /// `rule`: the ids of the deciding rules.
    Rule,
    /// `approval`: the approvals a held request waited for (`ap-…`), or the grants that
    /// approved it without asking (`gr-…`).
    Approval,
    /// `approver`: who decided the approvals (`root (uid 0, pid 4242)`).
    Approver,
    /// `outcome`: how the request ended.
    Outcome,
    /// `status`: the HTTP status answered.
    Status,
    /// `bytes_up`: request body bytes sent upstream.
    BytesUp,
    /// `bytes_down`: response body bytes returned to the agent.
    BytesDown,
    /// `duration_ms`: milliseconds from receipt to the end of the answer.
    DurationMs,
    /// `requests`: how many requests an intercepted tunnel carried.
    Requests,
    /// `ended`: how an intercepted tunnel or a WebSocket ended.
    Ended,
    /// `dropped`: how many records could not be copied to the broker's stdout.
    Dropped,
    /// `reason`: a short stable code such as `policy_denied`.
    Reason,
    /// `prev`: the chain hash of the previous line.
    Prev,
}

// === impl Field ===

impl Field {
    /// Every field, in the order `to_line` writes them.
    pub const ALL: [Field; 30] = [
        Field::V,
        Field::Ts,
        Field::Id,
        Field::Phase,
        Field::Agent,
        Field::Capability,
        Field::Method,
        Field::Scheme,
        Field::Host,
        Field::Port,
        Field::Path,
        Field::QueryKeys,
        Field::Aliases,
        Field::Skipped,
        Field::SkippedCount,
        Field::McpTool,
        Field::Decision,
        Field::Rule,
        Field::Approval,
        Field::Approver,
        Field::Outcome,
        Field::Status,
        Field::BytesUp,
        Field::BytesDown,
        Field::DurationMs,
        Field::Requests,
        Field::Ended,
        Field::Dropped,
        Field::Reason,
        Field::Prev,
    ];

    /// The field's JSON key.
    pub fn as_str(self) -> &'static str {
        match self {
            Field::V => "v",
            Field::Ts => "ts",
            Field::Id => "id",
            Field::Phase => "phase",
            Field::Agent => "agent",
            Field::Capability => "capability",
            Field::Method => "method",
            Field::Scheme => "scheme",
            Field::Host => "host",
            Field::Port => "port",
            Field::Path => "path",
            Field::QueryKeys => "query_keys",
            Field::Aliases => "aliases",
            Field::Skipped => "skipped",
            Field::SkippedCount => "skipped_count",
            Field::McpTool => "mcp_tool",
            Field::Decision => "decision",
            Field::Rule => "rule",
            Field::Approval => "approval",
            Field::Approver => "approver",
            Field::Outcome => "outcome",
            Field::Status => "status",
            Field::BytesUp => "bytes_up",
            Field::BytesDown => "bytes_down",
            Field::DurationMs => "duration_ms",
            Field::Requests => "requests",
            Field::Dropped => "dropped",
            Field::Ended => "ended",
            Field::Reason => "reason",
            Field::Prev => "prev",
        }
    }

    /// The field whose JSON key is `key`, if any.
    pub fn from_key(key: &str) -> Option<Field> {
        Field::ALL.into_iter().find(|field| field.as_str() == key)
    }

    fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A value that does not fit its field's type or grammar. Names the field, never the value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid value for field `{field}`")]
pub struct FieldError {
    field: Field,
}

// === impl FieldError ===

impl FieldError {
    /// The field the value was meant for.
    pub fn field(&self) -> Field {
        self.field
    }
}

macro_rules! text_type {
    ($(#[$doc:meta])* $name:ident, $field:expr, $check:path) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// Accepts `text` when it fits the grammar documented on the type.
            pub fn new(text: impl Into<String>) -> Result<Self, FieldError> {
                let text = text.into();
                if $check(&text) {
                    Ok(Self(text))
                } else {
                    Err(FieldError { field: $field })
                }
            }

            /// The checked text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

text_type! {
    /// `ts`: RFC 3339 UTC with milliseconds, exactly `YYYY-MM-DDTHH:MM:SS.mmmZ`, a real calendar
    /// date (leap years counted), hours 00–23, minutes and seconds 00–59 (no leap second).
    /// The fixed shape makes text order the same as time order.
    Timestamp, Field::Ts, is_timestamp
}

text_type! {
    /// `id`: 1–64 characters of `[A-Za-z0-9_-]`.
    RequestId, Field::Id, is_request_id
}

text_type! {
    /// `agent`: 1–64 characters of `[A-Za-z0-9._-]`.
    AgentName, Field::Agent, is_agent_name
}

text_type! {
    /// `capability`: a capability id, 1–64 characters of `[A-Za-z0-9-]`. There is no `_`, so a
    /// whole `mint_cap_<id>_<secret>` token can never be stored here.
    CapabilityId, Field::Capability, is_capability_id
}

text_type! {
    /// `method`: 1–32 HTTP token characters (RFC 9110 `tchar`), as requested (case kept).
    Method, Field::Method, is_method
}

text_type! {
    /// `scheme`: a lowercase URI scheme, `[a-z][a-z0-9+.-]{0,15}` (`https`, `http`).
    Scheme, Field::Scheme, is_scheme
}

text_type! {
    /// `host`: a canonical host, 1–253 characters of `[a-z0-9._:-]`: a lowercase ASCII DNS name
    /// (IDNs in their `xn--` form), an IPv4 address, or an IPv6 address without brackets.
    Host, Field::Host, is_host
}

text_type! {
    /// `path`: the upstream path without query or fragment: starts with `/`, at most 4096
    /// characters, printable ASCII other than `?` and `#` (non-ASCII bytes percent-encoded).
    UrlPath, Field::Path, is_url_path
}

text_type! {
    /// One of `query_keys`: a query parameter name as written in the URL (percent-encoded), at
    /// most 128 characters of printable ASCII other than `&`, `=` and `#`; may be empty.
    QueryKey, Field::QueryKeys, is_query_key
}

text_type! {
    /// One of `aliases`: an alias name, `[a-z0-9][a-z0-9_-]{0,63}`.
    AliasName, Field::Aliases, is_alias_name
}

text_type! {
    /// One of `skipped`: an alias name, `@` and the place in the body where a placeholder of that
    /// alias was forwarded as text (`json_value`, `json_key`, `form_value`, `form_key`,
    /// `text`): `github@json_value`. Never a pointer or a field name of the body, which are the
    /// agent's data.
    SkippedQuote, Field::Skipped, is_skipped_quote
}

text_type! {
    /// `mcp_tool`: an MCP tool name, 1–128 characters of printable ASCII without space.
    ToolName, Field::McpTool, is_tool_name
}

text_type! {
    /// One of `rule`: a policy rule id, `[a-z0-9][a-z0-9._-]{0,63}`.
    RuleId, Field::Rule, is_rule_id
}

text_type! {
    /// One of `approval`: an approval id, `ap-` and 8 characters of `[a-z0-9]`, or a grant id,
    /// `gr-` and 8 of the same.
    ApprovalId, Field::Approval, is_approval_id
}

text_type! {
    /// One of `approver`: who decided, as the operator socket saw them: 1–96 characters of
    /// printable ASCII other than `"`, `\\` and control characters (`root (uid 0, pid 4242)`).
    Approver, Field::Approver, is_approver
}

text_type! {
    /// `reason`: a short stable code in lowercase snake case, `[a-z][a-z0-9]*(_[a-z0-9]+)*`, at
    /// most 64 characters: `policy_denied`, `capability_invalid`, `policy_reload_failed`.
    ReasonCode, Field::Reason, is_reason_code
}

text_type! {
    /// `prev`: `sha256:` and 64 lowercase hex digits, the hash of the previous line.
    ChainHash, Field::Prev, is_chain_hash
}

// === impl Timestamp ===

impl Timestamp {
    /// The timestamp `ms` milliseconds after 1970-01-01T00:00:00.000Z. Refused past the year 9999.
    pub fn from_unix_millis(ms: u64) -> Result<Timestamp, FieldError> {
        if ms > MAX_UNIX_MILLIS {
            return Err(FieldError { field: Field::Ts });
        }
        let (secs, milli) = (ms / 1000, ms % 1000);
        let (days, rem) = (secs / 86_400, secs % 86_400);
        let (hour, min, sec) = (rem / 3600, rem % 3600 / 60, rem % 60);
        // Civil date from days since the epoch (H. Hinnant's algorithm), unsigned since ms >= 0.
        let z = days + 719_468;
        let era = z / 146_097;
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = doy - (153 * mp + 2) / 5 + 1;
        let month = if mp < 10 { mp + 3 } else { mp - 9 };
        let year = yoe + era * 400 + u64::from(month <= 2);
        // Digits into a fixed buffer: no formatting machinery on the audit's hot path.
        let mut text = *b"0000-00-00T00:00:00.000Z";
        for (range, value) in [
            (0..4, year),
            (5..7, month),
            (8..10, day),
            (11..13, hour),
            (14..16, min),
            (17..19, sec),
            (20..23, milli),
        ] {
            let mut value = value;
            for digit in text.get_mut(range).into_iter().flatten().rev() {
                // `value % 10` is below 10: the cast keeps it whole.
                *digit = b'0' + (value % 10) as u8;
                value /= 10;
            }
        }
        let text = String::from_utf8(text.to_vec()).map_err(|_| FieldError { field: Field::Ts })?;
        // Correct by construction (and proptested against the grammar); checked in debug builds.
        debug_assert!(is_timestamp(&text), "{text}");
        Ok(Timestamp(text))
    }
}

// === impl ChainHash ===

impl ChainHash {
    /// The `prev` of the first line of a log (`GENESIS_PREV`).
    pub fn genesis() -> ChainHash {
        ChainHash(GENESIS_PREV.to_owned())
    }

    /// The chain hash of `line`: the SHA-256 of its bytes, which must not include the newline.
    pub fn of_line(line: &str) -> ChainHash {
        let digest = Sha256::digest(line.as_bytes());
        let mut text = String::with_capacity(GENESIS_PREV.len());
        text.push_str("sha256:");
        for byte in digest {
            for nibble in [byte >> 4, byte & 0x0f] {
                // INVARIANT: a nibble is below 16, the length of the table.
                text.push(char::from(HEX_DIGITS[usize::from(nibble)]));
            }
        }
        ChainHash(text)
    }
}

/// `chain_hash(line)` is `sha256:` and the lowercase hex SHA-256 of `line`'s bytes (pass the line
/// without its newline). The next line of the log carries it as `prev`.
pub fn chain_hash(line: &str) -> String {
    ChainHash::of_line(line).0
}

/// `status`: an HTTP status code, 100–599.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct HttpStatus(u16);

// === impl HttpStatus ===

impl HttpStatus {
    /// Accepts a status from 100 to 599.
    pub fn new(code: u16) -> Result<HttpStatus, FieldError> {
        if (100..=599).contains(&code) {
            Ok(HttpStatus(code))
        } else {
            Err(FieldError {
                field: Field::Status,
            })
        }
    }

    /// The status code.
    pub fn get(self) -> u16 {
        self.0
    }
}

/// `v`: the record format version. Only version 1 exists; it is written as the number `1`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Version {
    /// Version 1, described by this module.
    #[default]
    V1,
}

impl Serialize for Version {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Version::V1 => serializer.serialize_u8(1),
        }
    }
}

/// `phase`: which of a request's records this is, or a broker event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// Written before anything is forwarded: what was decided and why.
    Decision,
    /// Written when the request is over: how it ended.
    Outcome,
    /// A broker event not tied to one request, such as a failed reload.
    Event,
}

// === impl Phase ===

impl Phase {
    /// The JSON spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Decision => "decision",
            Phase::Outcome => "outcome",
            Phase::Event => "event",
        }
    }

    fn from_name(name: &str) -> Option<Phase> {
        [Phase::Decision, Phase::Outcome, Phase::Event]
            .into_iter()
            .find(|phase| phase.as_str() == name)
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `decision`: what Mint decided for a request (named so to stay apart from the evaluator's).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AuditDecision {
    /// The request may be forwarded.
    Allow,
    /// The request is refused.
    Deny,
    /// The request is refused because a call limit is exhausted.
    Limited,
    /// The request waits for an operator's approval; a second decision record follows.
    Pending,
}

// === impl AuditDecision ===

impl AuditDecision {
    /// The JSON spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            AuditDecision::Allow => "allow",
            AuditDecision::Deny => "deny",
            AuditDecision::Limited => "limited",
            AuditDecision::Pending => "pending",
        }
    }

    fn from_name(name: &str) -> Option<AuditDecision> {
        [
            AuditDecision::Allow,
            AuditDecision::Deny,
            AuditDecision::Limited,
            AuditDecision::Pending,
        ]
        .into_iter()
        .find(|decision| decision.as_str() == name)
    }
}

impl fmt::Display for AuditDecision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `outcome`: how a request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// The upstream answered; its status is recorded.
    Completed,
    /// Never sent: DNS, connect or TLS failed.
    Failed,
    /// Sent, then timeout, reset or oversized answer: it may have had effects. Never retried.
    Unknown,
    /// Refused by the capability, the alias binding or the policy.
    Denied,
    /// Refused by a call limit.
    Limited,
    /// Refused as malformed.
    Invalid,
}

// === impl Outcome ===

impl Outcome {
    /// The JSON spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Completed => "completed",
            Outcome::Failed => "failed",
            Outcome::Unknown => "unknown",
            Outcome::Denied => "denied",
            Outcome::Limited => "limited",
            Outcome::Invalid => "invalid",
        }
    }

    fn from_name(name: &str) -> Option<Outcome> {
        [
            Outcome::Completed,
            Outcome::Failed,
            Outcome::Unknown,
            Outcome::Denied,
            Outcome::Limited,
            Outcome::Invalid,
        ]
        .into_iter()
        .find(|outcome| outcome.as_str() == name)
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `ended`: how an intercepted `CONNECT` tunnel (its `tunnel_closed` outcome record) or a
/// WebSocket (its outcome record, status 101) ended. A tunnel that carried a WebSocket ends as
/// the socket did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TunnelEnd {
    /// The agent closed it (or it was never taken over).
    ClientClosed,
    /// The upstream closed it, with a close frame or without (a WebSocket).
    UpstreamClosed,
    /// Mint's shutdown closed it.
    Shutdown,
    /// A deadline closed it: the TLS handshake, a request head, an idle keep-alive, or a
    /// WebSocket's idle timeout.
    Timeout,
    /// A WebSocket reached `--max-websocket-lifetime`.
    Lifetime,
    /// The capability it was opened with was revoked (or removed from the capabilities file).
    CapabilityRevoked,
    /// The capability it was opened with expired.
    CapabilityExpired,
    /// A reload of the policy or the aliases no longer allows a WebSocket's opening handshake.
    PolicyDenied,
    /// A TLS or protocol error closed it, or Mint refused its handshake; for a WebSocket, a
    /// frame over the bound, a broken frame, or the capability token in a frame.
    Error,
}

// === impl TunnelEnd ===

impl TunnelEnd {
    /// Every ending, in documentation order.
    pub const ALL: [TunnelEnd; 9] = [
        TunnelEnd::ClientClosed,
        TunnelEnd::UpstreamClosed,
        TunnelEnd::Shutdown,
        TunnelEnd::Timeout,
        TunnelEnd::Lifetime,
        TunnelEnd::CapabilityRevoked,
        TunnelEnd::CapabilityExpired,
        TunnelEnd::PolicyDenied,
        TunnelEnd::Error,
    ];

    /// The JSON spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            TunnelEnd::ClientClosed => "client_closed",
            TunnelEnd::UpstreamClosed => "upstream_closed",
            TunnelEnd::Shutdown => "shutdown",
            TunnelEnd::Timeout => "timeout",
            TunnelEnd::Lifetime => "lifetime",
            TunnelEnd::CapabilityRevoked => "capability_revoked",
            TunnelEnd::CapabilityExpired => "capability_expired",
            TunnelEnd::PolicyDenied => "policy_denied",
            TunnelEnd::Error => "error",
        }
    }

    fn from_name(name: &str) -> Option<TunnelEnd> {
        TunnelEnd::ALL.into_iter().find(|end| end.as_str() == name)
    }
}

impl fmt::Display for TunnelEnd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One audit record. Serializes (and `to_line` writes) its fields in declaration order, leaving
/// out absent ones. Which fields each phase carries is in the module documentation; `check`
/// enforces it. Every text field has a type that checked its grammar, so no field can hold a
/// header value, a query value, a body or a token by construction.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AuditRecord {
    /// Format version.
    pub v: Version,
    /// When the record was made.
    pub ts: Timestamp,
    /// The request id (for an event: an id of its own).
    pub id: RequestId,
    /// Which record this is.
    pub phase: Phase,
    /// The capability's agent name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent: Option<AgentName>,
    /// The capability id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capability: Option<CapabilityId>,
    /// The HTTP method.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub method: Option<Method>,
    /// The upstream scheme.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scheme: Option<Scheme>,
    /// The canonical upstream host.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<Host>,
    /// The upstream port.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<NonZeroU16>,
    /// The canonical upstream path.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<UrlPath>,
    /// Query parameter names (never values); empty is written as absent. At most
    /// `MAX_QUERY_KEYS`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub query_keys: Vec<QueryKey>,
    /// Aliases whose placeholders the request holds; empty is written as absent. At most
    /// `MAX_ALIASES`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub aliases: Vec<AliasName>,
    /// Where the body quoted placeholders that were forwarded as text, each `alias@place` once;
    /// empty is written as absent. At most `MAX_SKIPPED`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<SkippedQuote>,
    /// How many placeholders the body quoted as text (malformed ones and those past
    /// `MAX_SKIPPED` included).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped_count: Option<u64>,
    /// The MCP tool called.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mcp_tool: Option<ToolName>,
    /// What was decided (decision records only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decision: Option<AuditDecision>,
    /// The deciding rule ids (decision records only): absent when no policy ran (the request was
    /// refused before), empty when the policy's default decided. At most `MAX_RULE_IDS`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<Vec<RuleId>>,
    /// The approvals a held request waited for, or the grants that approved it (decision
    /// records only); empty is written as absent. At most `MAX_APPROVALS`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub approval: Vec<ApprovalId>,
    /// Who decided those approvals (decision records only); empty is written as absent. At most
    /// `MAX_APPROVERS`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub approver: Vec<Approver>,
    /// How the request ended (outcome records only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outcome: Option<Outcome>,
    /// The HTTP status answered to the agent (outcome records only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<HttpStatus>,
    /// Request body bytes sent upstream (outcome records only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes_up: Option<u64>,
    /// Response body bytes returned to the agent (outcome records only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes_down: Option<u64>,
    /// Milliseconds from receipt to the end of the answer (outcome records only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// How many requests an intercepted tunnel carried (its `tunnel_closed` outcome only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requests: Option<u64>,
    /// How an intercepted tunnel (its `tunnel_closed` outcome) or a WebSocket (its outcome,
    /// status 101) ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ended: Option<TunnelEnd>,
    /// How many records, since the last such event, the broker wrote to this log but could not
    /// copy to its stdout (`--audit-stdout`; an `audit_stdout_dropped` event only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dropped: Option<u64>,
    /// A short stable code saying why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<ReasonCode>,
    /// The chain hash of the previous line, or `GENESIS_PREV` for the first line.
    pub prev: ChainHash,
}

// === impl AuditRecord ===

impl AuditRecord {
    /// A decision record with no optional field set yet.
    pub fn decision(
        ts: Timestamp,
        id: RequestId,
        decision: AuditDecision,
        prev: ChainHash,
    ) -> AuditRecord {
        AuditRecord {
            decision: Some(decision),
            ..AuditRecord::empty(ts, id, Phase::Decision, prev)
        }
    }

    /// An outcome record with no optional field set yet.
    pub fn outcome(ts: Timestamp, id: RequestId, outcome: Outcome, prev: ChainHash) -> AuditRecord {
        AuditRecord {
            outcome: Some(outcome),
            ..AuditRecord::empty(ts, id, Phase::Outcome, prev)
        }
    }

    /// An event record with its reason and no optional field set yet.
    pub fn event(ts: Timestamp, id: RequestId, reason: ReasonCode, prev: ChainHash) -> AuditRecord {
        AuditRecord {
            reason: Some(reason),
            ..AuditRecord::empty(ts, id, Phase::Event, prev)
        }
    }

    fn empty(ts: Timestamp, id: RequestId, phase: Phase, prev: ChainHash) -> AuditRecord {
        AuditRecord {
            v: Version::V1,
            ts,
            id,
            phase,
            agent: None,
            capability: None,
            method: None,
            scheme: None,
            host: None,
            port: None,
            path: None,
            query_keys: Vec::new(),
            aliases: Vec::new(),
            skipped: Vec::new(),
            skipped_count: None,
            mcp_tool: None,
            decision: None,
            rule: None,
            approval: Vec::new(),
            approver: Vec::new(),
            outcome: None,
            status: None,
            bytes_up: None,
            bytes_down: None,
            duration_ms: None,
            requests: None,
            ended: None,
            dropped: None,
            reason: None,
            prev,
        }
    }

    /// Checks the phase rules and list sizes (see the module documentation). A record that passes
    /// writes a line `parse_record` accepts; the audit writer must refuse one that does not.
    pub fn check(&self) -> Result<(), ShapeError> {
        let phase = self.phase;
        let missing = |field| Err(ShapeError::MissingField { field, phase });
        let refused = |field| Err(ShapeError::NotAllowed { field, phase });
        let too_many = |field| Err(ShapeError::TooManyItems { field });

        if self.query_keys.len() > MAX_QUERY_KEYS {
            return too_many(Field::QueryKeys);
        }
        if self.aliases.len() > MAX_ALIASES {
            return too_many(Field::Aliases);
        }
        if self.skipped.len() > MAX_SKIPPED {
            return too_many(Field::Skipped);
        }
        if self
            .rule
            .as_ref()
            .is_some_and(|ids| ids.len() > MAX_RULE_IDS)
        {
            return too_many(Field::Rule);
        }
        if self.approval.len() > MAX_APPROVALS {
            return too_many(Field::Approval);
        }
        if self.approver.len() > MAX_APPROVERS {
            return too_many(Field::Approver);
        }
        if self.phase != Phase::Decision {
            if !self.approval.is_empty() {
                return refused(Field::Approval);
            }
            if !self.approver.is_empty() {
                return refused(Field::Approver);
            }
        }
        let outcome_only = [
            (Field::Status, self.status.is_some()),
            (Field::BytesUp, self.bytes_up.is_some()),
            (Field::BytesDown, self.bytes_down.is_some()),
            (Field::DurationMs, self.duration_ms.is_some()),
            (Field::Requests, self.requests.is_some()),
            (Field::Ended, self.ended.is_some()),
        ];
        if phase != Phase::Event && self.dropped.is_some() {
            return refused(Field::Dropped);
        }
        match phase {
            Phase::Decision => {
                let Some(decision) = self.decision else {
                    return missing(Field::Decision);
                };
                if self.outcome.is_some() {
                    return refused(Field::Outcome);
                }
                if let Some((field, _)) = outcome_only.iter().find(|(_, present)| *present) {
                    return refused(*field);
                }
                if decision != AuditDecision::Allow && self.reason.is_none() {
                    return missing(Field::Reason);
                }
            }
            Phase::Outcome => {
                let Some(outcome) = self.outcome else {
                    return missing(Field::Outcome);
                };
                if self.decision.is_some() {
                    return refused(Field::Decision);
                }
                if self.rule.is_some() {
                    return refused(Field::Rule);
                }
                if outcome == Outcome::Completed && self.status.is_none() {
                    return missing(Field::Status);
                }
                if outcome != Outcome::Completed && self.reason.is_none() {
                    return missing(Field::Reason);
                }
                // A closed tunnel's summary is whole or absent; a WebSocket's outcome (status
                // 101) says how it ended without counting requests.
                let websocket = self.status.is_some_and(|status| status.get() == 101);
                match (self.requests.is_some(), self.ended.is_some()) {
                    (true, false) => return missing(Field::Ended),
                    (false, true) if !websocket => return missing(Field::Requests),
                    _ => {}
                }
            }
            Phase::Event => {
                if self.decision.is_some() {
                    return refused(Field::Decision);
                }
                if self.rule.is_some() {
                    return refused(Field::Rule);
                }
                if self.outcome.is_some() {
                    return refused(Field::Outcome);
                }
                if let Some((field, _)) = outcome_only.iter().find(|(_, present)| *present) {
                    return refused(*field);
                }
                if self.reason.is_none() {
                    return missing(Field::Reason);
                }
            }
        }
        Ok(())
    }

    /// The record as one line of compact JSON, fields in `Field::ALL` order, without a newline.
    /// Call `check` first: a record that fails it is written anyway but will not parse back.
    pub fn to_line(&self) -> String {
        // Serializing plain strings, integers and unit enums into memory cannot fail; the
        // fallback keeps this path free of panics and still yields a line no parser accepts.
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// A record whose fields do not fit its phase (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ShapeError {
    /// A field the phase (or the decision or outcome) requires is absent.
    #[error("missing field `{field}` in a {phase} record")]
    MissingField {
        /// The absent field.
        field: Field,
        /// The record's phase.
        phase: Phase,
    },
    /// A field the phase does not carry is present.
    #[error("field `{field}` is not allowed in a {phase} record")]
    NotAllowed {
        /// The field present.
        field: Field,
        /// The record's phase.
        phase: Phase,
    },
    /// A list holds more items than its limit.
    #[error("too many items in field `{field}`")]
    TooManyItems {
        /// The list.
        field: Field,
    },
}

// === impl ShapeError ===

impl ShapeError {
    /// The field concerned.
    pub fn field(&self) -> Field {
        match *self {
            ShapeError::MissingField { field, .. }
            | ShapeError::NotAllowed { field, .. }
            | ShapeError::TooManyItems { field } => field,
        }
    }
}

/// Why `parse_record` refused a line: a 1-based column (counted in characters) and a kind.
/// Never holds any text or number from the line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("column {column}: {kind}")]
pub struct RecordError {
    column: usize,
    kind: RecordErrorKind,
}

// === impl RecordError ===

impl RecordError {
    /// The 1-based column, in characters, where the problem was found.
    pub fn column(&self) -> usize {
        self.column
    }

    /// The kind of problem.
    pub fn kind(&self) -> RecordErrorKind {
        self.kind
    }
}

impl Serialize for RecordError {
    /// Writes `{"column":17,"kind":"invalid_value","field":"ts"}` (`field` only when known).
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let field = self.kind.field();
        let mut map = serializer.serialize_map(Some(2 + usize::from(field.is_some())))?;
        map.serialize_entry("column", &self.column)?;
        map.serialize_entry("kind", self.kind.code())?;
        if let Some(field) = field {
            map.serialize_entry("field", field.as_str())?;
        }
        map.end()
    }
}

/// The kind of problem in a refused line. Known field names only; never a value or unknown key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RecordErrorKind {
    /// Not valid JSON.
    NotJson,
    /// Valid JSON, but not an object.
    NotAnObject,
    /// Longer than `MAX_LINE_BYTES`.
    TooLong,
    /// Nested deeper than `MAX_DEPTH`.
    TooDeep,
    /// A CR or LF inside the line.
    LineBreak,
    /// A known field appears twice.
    DuplicateKey {
        /// The repeated field.
        field: Field,
    },
    /// A key that is not a field of the record (deliberately not named).
    UnknownField,
    /// A required field is absent.
    MissingField {
        /// The absent field.
        field: Field,
    },
    /// A value of the wrong type, range or grammar.
    InvalidValue {
        /// The field holding it.
        field: Field,
    },
    /// A field the record's phase does not carry.
    FieldNotAllowed {
        /// The field present.
        field: Field,
        /// The record's phase.
        phase: Phase,
    },
}

// === impl RecordErrorKind ===

impl RecordErrorKind {
    /// A stable snake-case code: `not_json`, `invalid_value`, …
    pub fn code(self) -> &'static str {
        match self {
            RecordErrorKind::NotJson => "not_json",
            RecordErrorKind::NotAnObject => "not_an_object",
            RecordErrorKind::TooLong => "too_long",
            RecordErrorKind::TooDeep => "too_deep",
            RecordErrorKind::LineBreak => "line_break",
            RecordErrorKind::DuplicateKey { .. } => "duplicate_key",
            RecordErrorKind::UnknownField => "unknown_field",
            RecordErrorKind::MissingField { .. } => "missing_field",
            RecordErrorKind::InvalidValue { .. } => "invalid_value",
            RecordErrorKind::FieldNotAllowed { .. } => "field_not_allowed",
        }
    }

    /// The known field concerned, if any.
    pub fn field(self) -> Option<Field> {
        match self {
            RecordErrorKind::DuplicateKey { field }
            | RecordErrorKind::MissingField { field }
            | RecordErrorKind::InvalidValue { field }
            | RecordErrorKind::FieldNotAllowed { field, .. } => Some(field),
            RecordErrorKind::NotJson
            | RecordErrorKind::NotAnObject
            | RecordErrorKind::TooLong
            | RecordErrorKind::TooDeep
            | RecordErrorKind::LineBreak
            | RecordErrorKind::UnknownField => None,
        }
    }
}

impl fmt::Display for RecordErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecordErrorKind::NotJson => f.write_str("not valid JSON"),
            RecordErrorKind::NotAnObject => f.write_str("not a JSON object"),
            RecordErrorKind::TooLong => write!(f, "line longer than {MAX_LINE_BYTES} bytes"),
            RecordErrorKind::TooDeep => write!(f, "nested deeper than {MAX_DEPTH} levels"),
            RecordErrorKind::LineBreak => f.write_str("line break inside the record"),
            RecordErrorKind::DuplicateKey { field } => write!(f, "duplicate field `{field}`"),
            RecordErrorKind::UnknownField => f.write_str("unknown field"),
            RecordErrorKind::MissingField { field } => write!(f, "missing field `{field}`"),
            RecordErrorKind::InvalidValue { field } => {
                write!(f, "invalid value for field `{field}`")
            }
            RecordErrorKind::FieldNotAllowed { field, phase } => {
                write!(f, "field `{field}` is not allowed in a {phase} record")
            }
        }
    }
}

/// Parses one line (without its newline) as an audit record, strictly: see the module
/// documentation. Lines longer than `MAX_LINE_BYTES`, holding CR or LF, or nested deeper than
/// `MAX_DEPTH` are refused before parsing. The first problem found is reported.
pub fn parse_record(line: &str) -> Result<AuditRecord, RecordError> {
    precheck(line)?;
    let mut parser = Parser { line, pos: 0 };
    parser.whitespace();
    let start = parser.pos;
    match parser.peek() {
        Some(b'{') => {}
        Some(_) => {
            parser.skip_value(0)?;
            parser.whitespace();
            return Err(match parser.peek() {
                None => parser.error_at(start, RecordErrorKind::NotAnObject),
                Some(_) => parser.error(RecordErrorKind::NotJson),
            });
        }
        None => return Err(parser.error(RecordErrorKind::NotJson)),
    }
    let draft = parser.object()?;
    parser.whitespace();
    if parser.peek().is_some() {
        return Err(parser.error(RecordErrorKind::NotJson));
    }
    draft.finish(&parser)
}

/// Refuses, without parsing, lines that are too long, hold a line break or nest too deep.
fn precheck(line: &str) -> Result<(), RecordError> {
    if line.len() > MAX_LINE_BYTES {
        let mut end = MAX_LINE_BYTES;
        while !line.is_char_boundary(end) {
            end -= 1;
        }
        return Err(RecordError {
            column: column_at(line, end),
            kind: RecordErrorKind::TooLong,
        });
    }
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for (at, byte) in line.bytes().enumerate() {
        let kind = match byte {
            b'\r' | b'\n' => Some(RecordErrorKind::LineBreak),
            _ if in_string => {
                match (escaped, byte) {
                    (true, _) => escaped = false,
                    (false, b'\\') => escaped = true,
                    (false, b'"') => in_string = false,
                    _ => {}
                }
                None
            }
            b'"' => {
                in_string = true;
                None
            }
            b'{' | b'[' => {
                depth += 1;
                (depth > MAX_DEPTH).then_some(RecordErrorKind::TooDeep)
            }
            b'}' | b']' => {
                depth = depth.saturating_sub(1);
                None
            }
            _ => None,
        };
        if let Some(kind) = kind {
            return Err(RecordError {
                column: column_at(line, at),
                kind,
            });
        }
    }
    Ok(())
}

/// The 1-based character column of byte offset `at` in `line`.
fn column_at(line: &str, at: usize) -> usize {
    line.char_indices().take_while(|(i, _)| *i < at).count() + 1
}

/// A hand-written reader of the JSON subset a record needs, so that every error is our own
/// (serde_json's messages quote values) and points at the start of the offending token.
struct Parser<'a> {
    line: &'a str,
    pos: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.line.as_bytes().get(self.pos).copied()
    }

    fn error(&self, kind: RecordErrorKind) -> RecordError {
        self.error_at(self.pos, kind)
    }

    fn error_at(&self, at: usize, kind: RecordErrorKind) -> RecordError {
        RecordError {
            column: column_at(self.line, at),
            kind,
        }
    }

    fn whitespace(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    fn expect(&mut self, byte: u8) -> Result<(), RecordError> {
        if self.peek() == Some(byte) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.error(RecordErrorKind::NotJson))
        }
    }

    /// Reads the object's members into a draft; stops after the closing `}`.
    fn object(&mut self) -> Result<Draft, RecordError> {
        let mut draft = Draft::default();
        self.expect(b'{')?;
        self.whitespace();
        if self.peek() == Some(b'}') {
            draft.close = self.pos;
            self.pos += 1;
            return Ok(draft);
        }
        loop {
            self.whitespace();
            let key_at = self.pos;
            if self.peek() != Some(b'"') {
                return Err(self.error(RecordErrorKind::NotJson));
            }
            let key = self.string()?;
            let Some(field) = Field::from_key(&key) else {
                return Err(self.error_at(key_at, RecordErrorKind::UnknownField));
            };
            let Some(slot) = draft.seen.get_mut(field.index()) else {
                return Err(self.error_at(key_at, RecordErrorKind::UnknownField));
            };
            if slot.is_some() {
                return Err(self.error_at(key_at, RecordErrorKind::DuplicateKey { field }));
            }
            *slot = Some(key_at);
            self.whitespace();
            self.expect(b':')?;
            self.whitespace();
            self.member(field, &mut draft)?;
            self.whitespace();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    draft.close = self.pos;
                    self.pos += 1;
                    return Ok(draft);
                }
                _ => return Err(self.error(RecordErrorKind::NotJson)),
            }
        }
    }

    /// Reads the value of `field` into the draft.
    fn member(&mut self, field: Field, draft: &mut Draft) -> Result<(), RecordError> {
        match field {
            Field::V => draft.v = Some(self.integer(field, |n| (n == 1).then_some(Version::V1))?),
            Field::Ts => draft.ts = Some(self.text(field, Timestamp::new)?),
            Field::Id => draft.id = Some(self.text(field, RequestId::new)?),
            Field::Phase => draft.phase = Some(self.keyword(field, Phase::from_name)?),
            Field::Agent => draft.agent = Some(self.text(field, AgentName::new)?),
            Field::Capability => draft.capability = Some(self.text(field, CapabilityId::new)?),
            Field::Method => draft.method = Some(self.text(field, Method::new)?),
            Field::Scheme => draft.scheme = Some(self.text(field, Scheme::new)?),
            Field::Host => draft.host = Some(self.text(field, Host::new)?),
            Field::Port => {
                let port = |n| u16::try_from(n).ok().and_then(NonZeroU16::new);
                draft.port = Some(self.integer(field, port)?);
            }
            Field::Path => draft.path = Some(self.text(field, UrlPath::new)?),
            Field::QueryKeys => {
                draft.query_keys = self.list(field, MAX_QUERY_KEYS, QueryKey::new)?
            }
            Field::Aliases => draft.aliases = self.list(field, MAX_ALIASES, AliasName::new)?,
            Field::Skipped => draft.skipped = self.list(field, MAX_SKIPPED, SkippedQuote::new)?,
            Field::SkippedCount => draft.skipped_count = Some(self.integer(field, Some)?),
            Field::McpTool => draft.mcp_tool = Some(self.text(field, ToolName::new)?),
            Field::Decision => {
                draft.decision = Some(self.keyword(field, AuditDecision::from_name)?);
            }
            Field::Rule => draft.rule = Some(self.list(field, MAX_RULE_IDS, RuleId::new)?),
            Field::Approval => {
                draft.approval = self.list(field, MAX_APPROVALS, ApprovalId::new)?;
            }
            Field::Approver => {
                draft.approver = self.list(field, MAX_APPROVERS, Approver::new)?;
            }
            Field::Outcome => draft.outcome = Some(self.keyword(field, Outcome::from_name)?),
            Field::Status => {
                let status = |n| u16::try_from(n).ok().and_then(|n| HttpStatus::new(n).ok());
                draft.status = Some(self.integer(field, status)?);
            }
            Field::BytesUp => draft.bytes_up = Some(self.integer(field, Some)?),
            Field::BytesDown => draft.bytes_down = Some(self.integer(field, Some)?),
            Field::DurationMs => draft.duration_ms = Some(self.integer(field, Some)?),
            Field::Requests => draft.requests = Some(self.integer(field, Some)?),
            Field::Ended => draft.ended = Some(self.keyword(field, TunnelEnd::from_name)?),
            Field::Dropped => draft.dropped = Some(self.integer(field, Some)?),
            Field::Reason => draft.reason = Some(self.text(field, ReasonCode::new)?),
            Field::Prev => draft.prev = Some(self.text(field, ChainHash::new)?),
        }
        Ok(())
    }

    /// The error for a value of the wrong JSON type: `invalid_value` when it is well-formed JSON,
    /// `not_json` when it is not.
    fn wrong_type(&mut self, field: Field) -> RecordError {
        let start = self.pos;
        match self.skip_value(0) {
            Ok(()) => self.error_at(start, RecordErrorKind::InvalidValue { field }),
            Err(error) => error,
        }
    }

    /// A JSON string checked by `make`.
    fn text<T>(
        &mut self,
        field: Field,
        make: impl FnOnce(String) -> Result<T, FieldError>,
    ) -> Result<T, RecordError> {
        let start = self.pos;
        if self.peek() != Some(b'"') {
            return Err(self.wrong_type(field));
        }
        let text = self.string()?;
        make(text).map_err(|_| self.error_at(start, RecordErrorKind::InvalidValue { field }))
    }

    /// A JSON string naming one variant of an enum.
    fn keyword<T>(
        &mut self,
        field: Field,
        lookup: impl FnOnce(&str) -> Option<T>,
    ) -> Result<T, RecordError> {
        self.text(field, |text| lookup(&text).ok_or(FieldError { field }))
    }

    /// A JSON number that must be a plain non-negative integer accepted by `make`.
    fn integer<T>(
        &mut self,
        field: Field,
        make: impl FnOnce(u64) -> Option<T>,
    ) -> Result<T, RecordError> {
        let start = self.pos;
        if !matches!(self.peek(), Some(b'-' | b'0'..=b'9')) {
            return Err(self.wrong_type(field));
        }
        self.number()?
            .and_then(make)
            .ok_or_else(|| self.error_at(start, RecordErrorKind::InvalidValue { field }))
    }

    /// A JSON array of strings, each checked by `make`, at most `max` of them.
    fn list<T>(
        &mut self,
        field: Field,
        max: usize,
        make: impl Fn(String) -> Result<T, FieldError>,
    ) -> Result<Vec<T>, RecordError> {
        let start = self.pos;
        if self.peek() != Some(b'[') {
            return Err(self.wrong_type(field));
        }
        self.pos += 1;
        let mut items = Vec::new();
        self.whitespace();
        if self.peek() == Some(b']') {
            self.pos += 1;
            return Ok(items);
        }
        loop {
            self.whitespace();
            if items.len() == max {
                return Err(self.error_at(start, RecordErrorKind::InvalidValue { field }));
            }
            items.push(self.text(field, &make)?);
            self.whitespace();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    return Ok(items);
                }
                _ => return Err(self.error(RecordErrorKind::NotJson)),
            }
        }
    }

    /// Reads a JSON string starting at its opening quote and returns its decoded text.
    fn string(&mut self) -> Result<String, RecordError> {
        self.expect(b'"')?;
        let mut text = String::new();
        let mut run = self.pos;
        loop {
            let Some(byte) = self.peek() else {
                return Err(self.error(RecordErrorKind::NotJson));
            };
            match byte {
                b'"' | b'\\' => {
                    // Runs end at ASCII bytes, so the slice falls on character boundaries.
                    let Some(plain) = self.line.get(run..self.pos) else {
                        return Err(self.error(RecordErrorKind::NotJson));
                    };
                    text.push_str(plain);
                    if byte == b'"' {
                        self.pos += 1;
                        return Ok(text);
                    }
                    text.push(self.escape()?);
                    run = self.pos;
                }
                0x00..=0x1f => return Err(self.error(RecordErrorKind::NotJson)),
                _ => self.pos += 1,
            }
        }
    }

    /// Reads one escape sequence starting at its backslash.
    fn escape(&mut self) -> Result<char, RecordError> {
        let start = self.pos;
        self.expect(b'\\')?;
        let Some(byte) = self.peek() else {
            return Err(self.error(RecordErrorKind::NotJson));
        };
        self.pos += 1;
        let simple = match byte {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => {
                let first = self.hex4()?;
                let code = match first {
                    0xd800..=0xdbff => {
                        if self.peek() != Some(b'\\') {
                            return Err(self.error_at(start, RecordErrorKind::NotJson));
                        }
                        self.pos += 1;
                        self.expect(b'u')?;
                        let second = self.hex4()?;
                        if !(0xdc00..=0xdfff).contains(&second) {
                            return Err(self.error_at(start, RecordErrorKind::NotJson));
                        }
                        0x10000 + ((first - 0xd800) << 10) + (second - 0xdc00)
                    }
                    other => other,
                };
                return char::from_u32(code)
                    .ok_or_else(|| self.error_at(start, RecordErrorKind::NotJson));
            }
            _ => return Err(self.error_at(start, RecordErrorKind::NotJson)),
        };
        Ok(simple)
    }

    fn hex4(&mut self) -> Result<u32, RecordError> {
        let mut value = 0;
        for _ in 0..4 {
            let digit = self
                .peek()
                .and_then(|byte| char::from(byte).to_digit(16))
                .ok_or_else(|| self.error(RecordErrorKind::NotJson))?;
            value = value * 16 + digit;
            self.pos += 1;
        }
        Ok(value)
    }

    /// Reads a JSON number. Returns its value when it is a plain non-negative integer that fits
    /// in a `u64` (no sign, fraction or exponent), `None` for any other well-formed number.
    fn number(&mut self) -> Result<Option<u64>, RecordError> {
        let mut plain = true;
        if self.peek() == Some(b'-') {
            plain = false;
            self.pos += 1;
        }
        let int_start = self.pos;
        match self.peek() {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => self.digits(),
            _ => return Err(self.error(RecordErrorKind::NotJson)),
        }
        let int_end = self.pos;
        if self.peek() == Some(b'.') {
            plain = false;
            self.pos += 1;
            self.required_digits()?;
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            plain = false;
            self.pos += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.pos += 1;
            }
            self.required_digits()?;
        }
        if !plain {
            return Ok(None);
        }
        Ok(self
            .line
            .get(int_start..int_end)
            .and_then(|digits| digits.parse::<u64>().ok()))
    }

    fn digits(&mut self) {
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.pos += 1;
        }
    }

    fn required_digits(&mut self) -> Result<(), RecordError> {
        if !matches!(self.peek(), Some(b'0'..=b'9')) {
            return Err(self.error(RecordErrorKind::NotJson));
        }
        self.digits();
        Ok(())
    }

    /// Skips one well-formed JSON value of any type. `depth` bounds the recursion even though
    /// `precheck` already refused deep nesting.
    fn skip_value(&mut self, depth: usize) -> Result<(), RecordError> {
        if depth >= MAX_DEPTH {
            return Err(self.error(RecordErrorKind::TooDeep));
        }
        match self.peek() {
            Some(b'"') => self.string().map(drop),
            Some(b'-' | b'0'..=b'9') => self.number().map(drop),
            Some(b't') => self.word("true"),
            Some(b'f') => self.word("false"),
            Some(b'n') => self.word("null"),
            Some(open @ (b'[' | b'{')) => {
                let close = if open == b'[' { b']' } else { b'}' };
                self.pos += 1;
                self.whitespace();
                if self.peek() == Some(close) {
                    self.pos += 1;
                    return Ok(());
                }
                loop {
                    self.whitespace();
                    if open == b'{' {
                        if self.peek() != Some(b'"') {
                            return Err(self.error(RecordErrorKind::NotJson));
                        }
                        self.string()?;
                        self.whitespace();
                        self.expect(b':')?;
                        self.whitespace();
                    }
                    self.skip_value(depth + 1)?;
                    self.whitespace();
                    match self.peek() {
                        Some(b',') => self.pos += 1,
                        Some(byte) if byte == close => {
                            self.pos += 1;
                            return Ok(());
                        }
                        _ => return Err(self.error(RecordErrorKind::NotJson)),
                    }
                }
            }
            _ => Err(self.error(RecordErrorKind::NotJson)),
        }
    }

    fn word(&mut self, word: &str) -> Result<(), RecordError> {
        for expected in word.bytes() {
            self.expect(expected)?;
        }
        Ok(())
    }
}

/// The fields read so far, and where each key started (for errors found after the object).
#[derive(Default)]
struct Draft {
    seen: [Option<usize>; Field::ALL.len()],
    close: usize,
    v: Option<Version>,
    ts: Option<Timestamp>,
    id: Option<RequestId>,
    phase: Option<Phase>,
    agent: Option<AgentName>,
    capability: Option<CapabilityId>,
    method: Option<Method>,
    scheme: Option<Scheme>,
    host: Option<Host>,
    port: Option<NonZeroU16>,
    path: Option<UrlPath>,
    query_keys: Vec<QueryKey>,
    aliases: Vec<AliasName>,
    skipped: Vec<SkippedQuote>,
    skipped_count: Option<u64>,
    mcp_tool: Option<ToolName>,
    decision: Option<AuditDecision>,
    rule: Option<Vec<RuleId>>,
    approval: Vec<ApprovalId>,
    approver: Vec<Approver>,
    outcome: Option<Outcome>,
    status: Option<HttpStatus>,
    bytes_up: Option<u64>,
    bytes_down: Option<u64>,
    duration_ms: Option<u64>,
    requests: Option<u64>,
    ended: Option<TunnelEnd>,
    dropped: Option<u64>,
    reason: Option<ReasonCode>,
    prev: Option<ChainHash>,
}

impl Draft {
    /// Checks required fields and the phase rules, and builds the record.
    fn finish(self, parser: &Parser<'_>) -> Result<AuditRecord, RecordError> {
        let missing = |field| parser.error_at(self.close, RecordErrorKind::MissingField { field });
        let v = self.v.ok_or_else(|| missing(Field::V))?;
        let ts = self.ts.ok_or_else(|| missing(Field::Ts))?;
        let id = self.id.ok_or_else(|| missing(Field::Id))?;
        let phase = self.phase.ok_or_else(|| missing(Field::Phase))?;
        let prev = self.prev.ok_or_else(|| missing(Field::Prev))?;
        let record = AuditRecord {
            v,
            ts,
            id,
            phase,
            agent: self.agent,
            capability: self.capability,
            method: self.method,
            scheme: self.scheme,
            host: self.host,
            port: self.port,
            path: self.path,
            query_keys: self.query_keys,
            aliases: self.aliases,
            skipped: self.skipped,
            skipped_count: self.skipped_count,
            mcp_tool: self.mcp_tool,
            decision: self.decision,
            rule: self.rule,
            approval: self.approval,
            approver: self.approver,
            outcome: self.outcome,
            status: self.status,
            bytes_up: self.bytes_up,
            bytes_down: self.bytes_down,
            duration_ms: self.duration_ms,
            requests: self.requests,
            ended: self.ended,
            dropped: self.dropped,
            reason: self.reason,
            prev,
        };
        match record.check() {
            Ok(()) => Ok(record),
            Err(problem) => {
                let field = problem.field();
                let key_at = self.seen.get(field.index()).copied().flatten();
                Err(match problem {
                    ShapeError::MissingField { field, .. } => {
                        parser.error_at(self.close, RecordErrorKind::MissingField { field })
                    }
                    ShapeError::NotAllowed { field, phase } => parser.error_at(
                        key_at.unwrap_or(self.close),
                        RecordErrorKind::FieldNotAllowed { field, phase },
                    ),
                    ShapeError::TooManyItems { field } => parser.error_at(
                        key_at.unwrap_or(self.close),
                        RecordErrorKind::InvalidValue { field },
                    ),
                })
            }
        }
    }
}

fn is_timestamp(text: &str) -> bool {
    const SHAPE: &[u8; 24] = b"dddd-dd-ddTdd:dd:dd.dddZ";
    let bytes = text.as_bytes();
    let shaped = bytes.len() == SHAPE.len()
        && bytes.iter().zip(SHAPE).all(|(byte, want)| match want {
            b'd' => byte.is_ascii_digit(),
            _ => byte == want,
        });
    if !shaped {
        return false;
    }
    let number = |from: usize, to: usize| {
        text.get(from..to)
            .and_then(|digits| digits.parse::<u32>().ok())
    };
    let (Some(year), Some(month), Some(day), Some(hour), Some(min), Some(sec)) = (
        number(0, 4),
        number(5, 7),
        number(8, 10),
        number(11, 13),
        number(14, 16),
        number(17, 19),
    ) else {
        return false;
    };
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let month_days = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return false,
    };
    (1..=month_days).contains(&day) && hour < 24 && min < 60 && sec < 60
}

fn bounded(text: &str, min: usize, max: usize, allowed: impl Fn(u8) -> bool) -> bool {
    (min..=max).contains(&text.len()) && text.bytes().all(allowed)
}

fn is_request_id(text: &str) -> bool {
    bounded(text, 1, 64, |b| {
        b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
    })
}

fn is_agent_name(text: &str) -> bool {
    bounded(text, 1, 64, |b| {
        b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')
    })
}

fn is_capability_id(text: &str) -> bool {
    bounded(text, 1, 64, |b| b.is_ascii_alphanumeric() || b == b'-')
}

fn is_method(text: &str) -> bool {
    bounded(text, 1, 32, |b| {
        b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
    })
}

fn is_scheme(text: &str) -> bool {
    text.as_bytes().first().is_some_and(u8::is_ascii_lowercase)
        && bounded(text, 1, 16, |b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'+' | b'.' | b'-')
        })
}

fn is_host(text: &str) -> bool {
    bounded(text, 1, 253, |b| {
        b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b':' | b'-')
    })
}

fn is_url_path(text: &str) -> bool {
    text.starts_with('/')
        && bounded(text, 1, 4096, |b| {
            b.is_ascii_graphic() && b != b'?' && b != b'#'
        })
}

fn is_query_key(text: &str) -> bool {
    bounded(text, 0, 128, |b| {
        b.is_ascii_graphic() && !matches!(b, b'&' | b'=' | b'#')
    })
}

fn is_alias_name(text: &str) -> bool {
    text.as_bytes()
        .first()
        .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        && bounded(text, 1, 64, |b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-'
        })
}

fn is_skipped_quote(text: &str) -> bool {
    text.split_once('@').is_some_and(|(alias, place)| {
        is_alias_name(alias) && crate::body::InertPlace::from_name(place).is_some()
    })
}

fn is_approval_id(text: &str) -> bool {
    (text
        .strip_prefix("ap-")
        .or_else(|| text.strip_prefix("gr-")))
    .is_some_and(|rest| {
        rest.len() == 8
            && rest
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    })
}

fn is_approver(text: &str) -> bool {
    bounded(text, 1, 96, |b| {
        (b' '..=b'~').contains(&b) && b != b'"' && b != b'\\'
    })
}

fn is_tool_name(text: &str) -> bool {
    bounded(text, 1, 128, |b| b.is_ascii_graphic())
}

fn is_rule_id(text: &str) -> bool {
    text.as_bytes()
        .first()
        .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        && bounded(text, 1, 64, |b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-')
        })
}

fn is_reason_code(text: &str) -> bool {
    text.as_bytes().first().is_some_and(u8::is_ascii_lowercase)
        && bounded(text, 1, 64, |b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'
        })
        && text.split('_').all(|word| !word.is_empty())
}

fn is_chain_hash(text: &str) -> bool {
    text.strip_prefix("sha256:").is_some_and(|hex| {
        hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// 9999-12-31T23:59:59.999Z in milliseconds since the epoch: the last time the format can hold.
const MAX_UNIX_MILLIS: u64 = 253_402_300_799_999;

const HEX_DIGITS: &[u8; 16] = b"0123456789abcdef";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_follow_the_exact_shape_and_calendar() {
        for good in [
            "2026-11-30T05:39:20.123Z",
            "2024-02-29T00:00:00.000Z",
            "2000-02-29T23:59:59.999Z",
            "0000-01-01T00:00:00.000Z",
            "9999-12-31T23:59:59.999Z",
        ] {
            assert!(is_timestamp(good), "{good}");
        }
        for bad in [
            "",
            "2026-11-30T05:39:20.123",
            "2026-11-30T05:39:20.123z",
            "2026-11-30t05:39:20.123Z",
            "2026-11-30 05:39:20.123Z",
            "2026-11-30T05:39:20Z",
            "2026-11-30T05:39:20.12Z",
            "2026-11-30T05:39:20.1234Z",
            "2026-11-30T05:39:20.123+00:00",
            "2026-13-01T00:00:00.000Z",
            "2026-00-01T00:00:00.000Z",
            "2026-04-31T00:00:00.000Z",
            "2026-01-00T00:00:00.000Z",
            "2023-02-29T00:00:00.000Z",
            "1900-02-29T00:00:00.000Z",
            "2026-11-30T24:00:00.000Z",
            "2026-11-30T05:60:00.000Z",
            "2026-11-30T05:39:60.000Z",
            "+026-11-30T05:39:20.123Z",
            "2026-11-30T05:39:2٠.123Z",
            " 2026-11-30T05:39:20.123Z",
        ] {
            assert!(!is_timestamp(bad), "{bad}");
        }
    }

    #[test]
    fn unix_millis_become_calendar_dates() {
        let at = |ms| Timestamp::from_unix_millis(ms).unwrap().as_str().to_owned();
        assert_eq!(at(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(at(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(at(1_796_017_160_123), "2026-11-30T05:39:20.123Z");
        assert_eq!(at(MAX_UNIX_MILLIS), "9999-12-31T23:59:59.999Z");
        assert!(Timestamp::from_unix_millis(MAX_UNIX_MILLIS + 1).is_err());
    }

    proptest::proptest! {
        #[test]
        fn every_unix_milli_becomes_a_timestamp_of_the_grammar(ms in 0..=MAX_UNIX_MILLIS) {
            let ts = Timestamp::from_unix_millis(ms).unwrap();
            proptest::prop_assert!(is_timestamp(ts.as_str()), "{}", ts.as_str());
        }

        #[test]
        fn timestamps_order_as_time_does(a in 0..=MAX_UNIX_MILLIS, b in 0..=MAX_UNIX_MILLIS) {
            let (ta, tb) = (
                Timestamp::from_unix_millis(a).unwrap(),
                Timestamp::from_unix_millis(b).unwrap(),
            );
            proptest::prop_assert_eq!(a.cmp(&b), ta.as_str().cmp(tb.as_str()));
        }
    }

    #[test]
    fn columns_count_characters_from_one() {
        assert_eq!(column_at("abc", 0), 1);
        assert_eq!(column_at("abc", 2), 3);
        assert_eq!(column_at("éé{", 4), 3);
        assert_eq!(column_at("abc", 10), 4);
    }

    #[test]
    fn chain_hash_is_sha256_hex() {
        assert_eq!(
            chain_hash(""),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(
            chain_hash("abc"),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert!(is_chain_hash(GENESIS_PREV));
        assert_eq!(ChainHash::genesis().as_str(), GENESIS_PREV);
    }

    #[test]
    fn reason_codes_are_snake_case() {
        for good in ["policy_denied", "capability_invalid", "e2e", "a_1"] {
            assert!(is_reason_code(good), "{good}");
        }
        let long = "a".repeat(65);
        for bad in ["", "_a", "a_", "a__b", "Policy", "1a", "a-b", long.as_str()] {
            assert!(!is_reason_code(bad), "{bad}");
        }
    }
}
