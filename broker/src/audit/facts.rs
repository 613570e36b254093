//! The facts about a request that may be audited, and the records built from them.
//!
//! The proxy collects a [`RequestFacts`] once, from the request as it arrived and before any
//! placeholder is substituted, and builds both of the request's records from it with
//! [`decision_record`] and [`outcome_record`], moving the facts in rather than copying them
//! ([`RequestFacts::from_record`] takes them back after the decision is written). These
//! functions take only what may be recorded: the method, the canonical target with its query
//! parameter *names*, alias *names*, the MCP tool name, the capability's id and agent. There is
//! no way to hand them a header value, a query value, a body or a secret, so none can reach the
//! log. Building the facts before substitution matters: a placeholder in a query key would
//! otherwise be recorded as its secret.

use std::num::NonZeroU16;

use mint_policy::audit::{
    AgentName, AliasName, ApprovalId, Approver, AuditDecision, AuditRecord, CapabilityId,
    ChainHash, Field, FieldError, Host, HttpStatus, MAX_QUERY_KEYS, Method, Outcome, QueryKey,
    ReasonCode, RequestId, RuleId, Scheme, SkippedQuote, Timestamp, ToolName, UrlPath,
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
    /// Where the body quoted placeholders that were forwarded as text.
    pub skipped: Vec<SkippedQuote>,
    /// How many placeholders the body quoted as text (`None`: none).
    pub skipped_count: Option<u64>,
    /// The MCP tool of a JSON-RPC `tools/call`.
    pub mcp_tool: Option<ToolName>,
}

// === impl RequestFacts ===

impl RequestFacts {
    /// Moves the facts out, leaving only a copy of the id behind (for Mint's log).
    pub fn take(&mut self) -> RequestFacts {
        let emptied = RequestFacts {
            id: self.id.clone(),
            agent: None,
            capability: None,
            method: None,
            target: None,
            aliases: Vec::new(),
            skipped: Vec::new(),
            skipped_count: None,
            mcp_tool: None,
        };
        std::mem::replace(self, emptied)
    }

    /// The record `start` makes from the request id, holding the other facts (moved).
    fn into_record(self, start: impl FnOnce(RequestId) -> AuditRecord) -> AuditRecord {
        let RequestFacts {
            id,
            agent,
            capability,
            method,
            target,
            aliases,
            skipped,
            skipped_count,
            mcp_tool,
        } = self;
        let mut record = start(id);
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
        record.skipped = skipped;
        record.skipped_count = skipped_count;
        record.mcp_tool = mcp_tool;
        record
    }

    /// The request facts `record` holds, moved out of it: the inverse of [`decision_record`] and
    /// [`outcome_record`], so the proxy can lend its facts to a record for the write and take
    /// them back without copying. The target comes back only when the record holds all of its
    /// parts (as those functions write it).
    pub fn from_record(record: AuditRecord) -> RequestFacts {
        let AuditRecord {
            id,
            agent,
            capability,
            method,
            scheme,
            host,
            port,
            path,
            query_keys,
            aliases,
            skipped,
            skipped_count,
            mcp_tool,
            ..
        } = record;
        let target = match (scheme, host, port, path) {
            (Some(scheme), Some(host), Some(port), Some(path)) => Some(TargetFacts {
                scheme,
                host,
                port,
                path,
                query_keys,
            }),
            _ => None,
        };
        RequestFacts {
            id,
            agent,
            capability,
            method,
            target,
            aliases,
            skipped,
            skipped_count,
            mcp_tool,
        }
    }
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
    /// The approvals a held request waited for, and the grants that approved it.
    pub approval: Vec<ApprovalId>,
    /// Who decided those approvals.
    pub approver: Vec<Approver>,
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

/// The `decision` record of a request. Its `prev` is set by the log. Takes the facts by value:
/// they move into the record instead of being copied, and [`RequestFacts::from_record`] takes
/// them back once the record is written (the outcome record needs them again).
pub fn decision_record(ts: Timestamp, request: RequestFacts, facts: DecisionFacts) -> AuditRecord {
    let mut record = request
        .into_record(|id| AuditRecord::decision(ts, id, facts.decision, ChainHash::genesis()));
    record.rule = facts.rules;
    record.reason = facts.reason;
    record.approval = facts.approval;
    record.approver = facts.approver;
    record
}

/// The `outcome` record of a request. Its `prev` is set by the log. Takes the facts by value:
/// the outcome is the request's last record, so they move into it instead of being copied.
pub fn outcome_record(ts: Timestamp, request: RequestFacts, facts: OutcomeFacts) -> AuditRecord {
    let mut record =
        request.into_record(|id| AuditRecord::outcome(ts, id, facts.outcome, ChainHash::genesis()));
    record.status = facts.status;
    record.bytes_up = facts.bytes_up;
    record.bytes_down = facts.bytes_down;
    record.duration_ms = facts.duration_ms;
    record.reason = facts.reason;
    record
}

fn cut(text: &str, max_chars: usize) -> &str {
    match text.char_indices().nth(max_chars) {
        Some((at, _)) => text.get(..at).unwrap_or(text),
        None => text,
    }
}

const MAX_QUERY_KEY_CHARS: usize = 128;

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(target: bool) -> RequestFacts {
        RequestFacts {
            id: RequestId::new("01JDZ4T6M2Q8W3E5R7Y9U1I3O5").unwrap(),
            agent: Some(AgentName::new("mino").unwrap()),
            capability: Some(CapabilityId::new("c7f3a9d2").unwrap()),
            method: Some(Method::new("POST").unwrap()),
            target: target.then(|| TargetFacts {
                scheme: Scheme::new("https").unwrap(),
                host: Host::new("api.github.com").unwrap(),
                port: NonZeroU16::new(8443).unwrap(),
                path: UrlPath::new("/repos/acme/docs/issues").unwrap(),
                query_keys: vec![QueryKey::new("state").unwrap()],
            }),
            aliases: vec![AliasName::new("github").unwrap()],
            skipped: vec![SkippedQuote::new("slack@json_value").unwrap()],
            skipped_count: Some(3),
            mcp_tool: Some(ToolName::new("create_issue").unwrap()),
        }
    }

    #[test]
    fn facts_lent_to_a_decision_record_come_back_whole() {
        for target in [true, false] {
            let decision = DecisionFacts {
                decision: AuditDecision::Deny,
                rules: Some(vec![RuleId::new("no-writes").unwrap()]),
                reason: Some(ReasonCode::new("policy_denied").unwrap()),
                approval: Vec::new(),
                approver: Vec::new(),
            };
            let record = decision_record(
                Timestamp::from_unix_millis(0).unwrap(),
                facts(target),
                decision,
            );
            record.check().unwrap();
            assert_eq!(record.host.is_some(), target);
            assert_eq!(record.rule.as_ref().map(Vec::len), Some(1));
            assert_eq!(RequestFacts::from_record(record), facts(target));
        }
    }

    #[test]
    fn an_outcome_record_holds_the_same_request_facts_as_the_decision() {
        let outcome = OutcomeFacts {
            outcome: Outcome::Completed,
            status: Some(HttpStatus::new(201).unwrap()),
            bytes_up: Some(12),
            bytes_down: Some(34),
            duration_ms: Some(5),
            reason: None,
        };
        let ts = Timestamp::from_unix_millis(0).unwrap();
        let record = outcome_record(ts, facts(true), outcome);
        record.check().unwrap();
        assert_eq!(record.status.map(HttpStatus::get), Some(201));
        assert_eq!(RequestFacts::from_record(record), facts(true));
    }
}
