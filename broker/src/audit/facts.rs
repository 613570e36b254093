//! The facts about a request that may be audited, and the records built from them.
//!
//! The proxy collects a [`RequestFacts`] once, from the request as it arrived and before any
//! placeholder is substituted, and builds both of the request's records from it with
//! [`decision_record`] and [`outcome_record`]. These functions take only what may be recorded:
//! the method, the canonical target with its query parameter *names*, alias *names*, the MCP
//! tool name, the capability's id and agent. There is no way to hand them a header value, a
//! query value, a body or a secret, so none can reach the log. Building the facts before
//! substitution matters: a placeholder in a query key would otherwise be recorded as its secret.

use std::num::NonZeroU16;

use mint_policy::audit::{
    AgentName, AliasName, AuditDecision, AuditRecord, CapabilityId, ChainHash, Field, FieldError,
    Host, HttpStatus, MAX_QUERY_KEYS, Method, Outcome, QueryKey, ReasonCode, RequestId, RuleId,
    Scheme, Timestamp, ToolName, UrlPath,
};
use mint_policy::normalize::Target;

/// What may be recorded about one request. Every field has a type that checked its grammar.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestFacts {
    /// The request id (also sent back as `Mint-Request-Id`).
    pub id: RequestId,
    /// The capability's agent, once authenticated.
    pub agent: Option<AgentName>,
    /// The capability's id (never the token), once authenticated.
    pub capability: Option<CapabilityId>,
    /// The method as requested.
    pub method: Option<Method>,
    /// The canonical target, once parsed.
    pub target: Option<TargetFacts>,
    /// The aliases whose placeholders the request holds.
    pub aliases: Vec<AliasName>,
    /// The MCP tool of a JSON-RPC `tools/call`.
    pub mcp_tool: Option<ToolName>,
}

/// The auditable part of a canonical [`Target`]: no query values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetFacts {
    /// `https` or `http`.
    pub scheme: Scheme,
    /// The canonical host.
    pub host: Host,
    /// The port.
    pub port: NonZeroU16,
    /// The canonical path, without the query.
    pub path: UrlPath,
    /// The query parameter names as written in the URL (percent-encoded), in order.
    pub query_keys: Vec<QueryKey>,
}

// === impl TargetFacts ===

impl TargetFacts {
    /// Takes the auditable facts of `target`. Query keys are taken as written (percent-encoded,
    /// never decoded into something else), at most `MAX_QUERY_KEYS` of them (the first ones),
    /// each cut to its first 128 characters; the values after `=` are never looked at. A path
    /// the record cannot hold (longer than 4096 characters) is an error: the proxy refuses a
    /// request it cannot audit.
    pub fn from_target(target: &Target) -> Result<TargetFacts, FactsError> {
        let query_keys = match &target.query {
            Some(query) => query
                .split('&')
                .filter(|pair| !pair.is_empty())
                .take(MAX_QUERY_KEYS)
                .map(|pair| {
                    let key = pair.split_once('=').map_or(pair, |(key, _)| key);
                    QueryKey::new(cut(key, MAX_QUERY_KEY_CHARS))
                })
                .collect::<Result<Vec<_>, _>>()?,
            None => Vec::new(),
        };
        Ok(TargetFacts {
            scheme: Scheme::new(target.scheme.as_str())?,
            host: Host::new(target.host.to_string())?,
            // Port 0 never comes out of `normalize_target`.
            port: NonZeroU16::new(target.port).ok_or(FactsError { field: Field::Port })?,
            path: UrlPath::new(target.path.as_str())?,
            query_keys,
        })
    }
}

/// A request fact the audit record cannot hold: the proxy refuses such a request rather than
/// forward it unrecorded. Names the field, never the value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("request cannot be audited: invalid value for field `{field}`")]
pub struct FactsError {
    field: Field,
}

// === impl FactsError ===

impl FactsError {
    /// The field whose value does not fit.
    pub fn field(&self) -> Field {
        self.field
    }
}

impl From<FieldError> for FactsError {
    fn from(error: FieldError) -> Self {
        FactsError {
            field: error.field(),
        }
    }
}

/// What was decided about a request, for its `decision` record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecisionFacts {
    /// Allow, deny or limited.
    pub decision: AuditDecision,
    /// The deciding rules: `None` when no policy ran, empty when the default decided.
    pub rules: Option<Vec<RuleId>>,
    /// Why, when the decision is not `allow` (required then).
    pub reason: Option<ReasonCode>,
}

/// How a request ended, for its `outcome` record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutcomeFacts {
    /// How it ended.
    pub outcome: Outcome,
    /// The status answered to the agent (required for `completed`).
    pub status: Option<HttpStatus>,
    /// Request body bytes sent upstream.
    pub bytes_up: Option<u64>,
    /// Response body bytes returned to the agent.
    pub bytes_down: Option<u64>,
    /// Milliseconds from receipt to the end of the answer.
    pub duration_ms: Option<u64>,
    /// Why, when the outcome is not `completed` (required then).
    pub reason: Option<ReasonCode>,
}

/// The `decision` record of a request. Its `prev` is set by the log.
pub fn decision_record(
    ts: Timestamp,
    request: &RequestFacts,
    facts: &DecisionFacts,
) -> AuditRecord {
    let mut record =
        AuditRecord::decision(ts, request.id.clone(), facts.decision, ChainHash::genesis());
    fill_request(&mut record, request);
    record.rule.clone_from(&facts.rules);
    record.reason.clone_from(&facts.reason);
    record
}

/// The `outcome` record of a request. Its `prev` is set by the log. Takes the facts by value:
/// the outcome is the request's last record, so they move into it instead of being copied.
pub fn outcome_record(ts: Timestamp, request: RequestFacts, facts: OutcomeFacts) -> AuditRecord {
    let RequestFacts {
        id,
        agent,
        capability,
        method,
        target,
        aliases,
        mcp_tool,
    } = request;
    let mut record = AuditRecord::outcome(ts, id, facts.outcome, ChainHash::genesis());
    record.agent = agent;
    record.capability = capability;
    record.method = method;
    if let Some(target) = target {
        record.scheme = Some(target.scheme);
        record.host = Some(target.host);
        record.port = Some(target.port);
        record.path = Some(target.path);
        record.query_keys = target.query_keys;
    }
    record.aliases = aliases;
    record.mcp_tool = mcp_tool;
    record.status = facts.status;
    record.bytes_up = facts.bytes_up;
    record.bytes_down = facts.bytes_down;
    record.duration_ms = facts.duration_ms;
    record.reason = facts.reason;
    record
}

fn fill_request(record: &mut AuditRecord, request: &RequestFacts) {
    record.agent.clone_from(&request.agent);
    record.capability.clone_from(&request.capability);
    record.method.clone_from(&request.method);
    if let Some(target) = &request.target {
        record.scheme = Some(target.scheme.clone());
        record.host = Some(target.host.clone());
        record.port = Some(target.port);
        record.path = Some(target.path.clone());
        record.query_keys.clone_from(&target.query_keys);
    }
    record.aliases.clone_from(&request.aliases);
    record.mcp_tool.clone_from(&request.mcp_tool);
}

fn cut(text: &str, max_chars: usize) -> &str {
    match text.char_indices().nth(max_chars) {
        Some((at, _)) => text.get(..at).unwrap_or(text),
        None => text,
    }
}

const MAX_QUERY_KEY_CHARS: usize = 128;
