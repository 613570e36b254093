//! Step 4a of the pipeline: a request an `approve` rule holds waits here for the operator.
//!
//! Before anything is substituted or sent, each held call (the request itself, or each MCP tool
//! call of a batch) is put in the broker's [`ApprovalBook`](crate::approval::ApprovalBook), unless
//! a live grant covers it; the `pending` decision record names the approvals; then the request
//! waits. Each call is decided on its own, and the request goes on only when every one is
//! approved: a denial, a timeout or the shutdown refuses it whole (the other calls' entries are
//! withdrawn), and nothing is sent. The agent going away drops the waiting future, which takes the
//! entries out of the book and leaves an `approval_withdrawn` record ([`super::Exchange`]'s drop).
//! Limits are not consulted here: the caller admits them once every call is approved.

use mint_policy::audit::{ApprovalId, Approver};
use mint_policy::evaluate::AliasUse;
use mint_policy::normalize::Target;

use super::mcp_call;
use super::pipeline::CallHold;
use super::{AppState, Exchange, ProxyError};
use crate::approval::display::{arguments, inert};
use crate::approval::{Held, HoldError, Summary, Ticket, Verdict};

/// What the operator is shown for a tool call whose arguments Mint could not read.
const UNREADABLE_ARGUMENTS: &str = "(Mint cannot show these arguments: the body holds a value it cannot represent, such as a number past 1e308. Deny unless you know what the agent sends.)";

/// What the operator is shown of the request, besides each call's tool and arguments.
pub(super) struct Shown<'a> {
    pub(super) agent: &'a str,
    pub(super) method: &'a str,
    pub(super) target: &'a Target,
    pub(super) uses: &'a [AliasUse],
    /// The decoded body, for the arguments of held tool calls.
    pub(super) body: &'a [u8],
}

/// Holds every call of `holds`, records the `pending` decision, and waits until each is
/// decided. `Ok` when all are approved (the exchange then carries the approvals and approvers for
/// the `allow` record); otherwise the refusal, with the approvals recorded.
pub(super) async fn await_approval(
    state: &AppState,
    exchange: &mut Exchange,
    holds: &[CallHold],
    shown: &Shown<'_>,
) -> Result<(), ProxyError> {
    let rules = union_of_rules(holds);
    let call_arguments = tool_arguments(shown.body);
    let book = state.approvals();
    let mut tickets: Vec<Ticket> = Vec::new();
    for hold in holds {
        let summary = summary(exchange, shown, hold, &call_arguments);
        match book.hold(summary, hold.timeout) {
            Ok(Held::Granted { grant, approver }) => {
                tracing::info!(request.id = %exchange.facts.id, grant = %grant, "Approved by a grant");
                note(exchange, &grant, Some(&approver));
            }
            Ok(Held::Waiting(ticket)) => {
                note(exchange, ticket.id(), None);
                tickets.push(ticket);
            }
            // The tickets taken so far are dropped on return: their entries are withdrawn.
            Err(HoldError::Full { limit }) => {
                return Err(ProxyError::ApprovalQueueFull {
                    rules,
                    limit,
                    per_agent: false,
                });
            }
            Err(HoldError::AgentFull { limit }) => {
                return Err(ProxyError::ApprovalQueueFull {
                    rules,
                    limit,
                    per_agent: true,
                });
            }
            Err(HoldError::ShuttingDown) => return Err(ProxyError::ShuttingDown { rules }),
        }
    }
    if tickets.is_empty() {
        // Every call was approved by a live grant: nothing waits.
        return Ok(());
    }
    exchange.record_pending(state, &rules).await?;
    tracing::info!(request.id = %exchange.facts.id, approvals = tickets.len(), "Waiting for approval");
    let verdict = match wait_all(tickets).await {
        Ok(approved) => {
            for (approver, grant) in approved {
                if let Some(grant) = grant {
                    note(exchange, &grant, None);
                }
                note_approver(exchange, &approver);
            }
            return Ok(());
        }
        Err(verdict) => verdict,
    };
    match verdict {
        Verdict::Approved { .. } => Ok(()),
        Verdict::Denied { approver } => {
            note_approver(exchange, &approver);
            Err(ProxyError::ApprovalDenied { rules })
        }
        Verdict::TimedOut => {
            let timeout = holds
                .iter()
                .map(|hold| hold.timeout)
                .min()
                .unwrap_or_default();
            Err(ProxyError::ApprovalTimeout { rules, timeout })
        }
        Verdict::ShuttingDown => Err(ProxyError::ShuttingDown { rules }),
    }
}

/// Waits for every ticket: each approval's approver and the grant it opened, or the first
/// verdict that is not an approval, which ends the wait (the other tickets are dropped, which
/// withdraws them).
async fn wait_all(tickets: Vec<Ticket>) -> Result<Vec<(String, Option<String>)>, Verdict> {
    let approved = |verdict| match verdict {
        Verdict::Approved { approver, grant } => Ok((approver, grant)),
        other => Err(other),
    };
    if tickets.len() == 1 {
        // The common case, without a task: dropping this future drops the ticket.
        let mut tickets = tickets;
        return match tickets.pop() {
            Some(ticket) => approved(ticket.wait().await).map(|one| vec![one]),
            None => Ok(Vec::new()),
        };
    }
    let mut waiting: tokio::task::JoinSet<Verdict> = tokio::task::JoinSet::new();
    for ticket in tickets {
        waiting.spawn(ticket.wait());
    }
    let mut all = Vec::new();
    while let Some(joined) = waiting.join_next().await {
        // A waiting task cannot panic; if one did, nothing is approved.
        all.push(approved(joined.unwrap_or(Verdict::ShuttingDown))?);
    }
    Ok(all)
}

/// The approve rules of every held call, each once, in call order.
fn union_of_rules(holds: &[CallHold]) -> Vec<String> {
    let mut rules: Vec<String> = Vec::new();
    for rule in holds.iter().flat_map(|hold| &hold.rules) {
        if !rules.contains(rule) {
            rules.push(rule.clone());
        }
    }
    rules
}

/// Notes an approval or grant id, and who decided it, for the decision records.
fn note(exchange: &mut Exchange, id: &str, approver: Option<&str>) {
    if let Ok(id) = ApprovalId::new(id)
        && exchange.approval.len() < mint_policy::audit::MAX_APPROVALS
        && !exchange.approval.contains(&id)
    {
        exchange.approval.push(id);
    }
    if let Some(approver) = approver {
        note_approver(exchange, approver);
    }
}

fn note_approver(exchange: &mut Exchange, approver: &str) {
    if let Ok(approver) = Approver::new(approver)
        && exchange.approver.len() < mint_policy::audit::MAX_APPROVERS
        && !exchange.approver.contains(&approver)
    {
        exchange.approver.push(approver);
    }
}

/// What the operator sees of one held call: every field inert for a terminal, the arguments
/// pretty and cut. Never a secret: nothing has been substituted.
fn summary(
    exchange: &Exchange,
    shown: &Shown<'_>,
    hold: &CallHold,
    call_arguments: &[serde_json::Value],
) -> Summary {
    let target = shown.target;
    let query_keys = target
        .query
        .as_deref()
        .map(|query| {
            query
                .split('&')
                .filter(|pair| !pair.is_empty())
                .map(|pair| inert(pair.split('=').next().unwrap_or_default(), false))
                .collect()
        })
        .unwrap_or_default();
    let mut aliases: Vec<String> = shown.uses.iter().map(|u| u.alias.clone()).collect();
    aliases.dedup();
    Summary {
        request_id: exchange.facts.id.as_str().to_owned(),
        agent: inert(shown.agent, false),
        rules: hold.rules.clone(),
        method: inert(shown.method, false),
        scheme: target.scheme.as_str().to_owned(),
        host: target.host.to_string(),
        port: target.port,
        path: inert(&target.path, false),
        query_keys,
        tool: hold.tool.as_deref().map(|tool| inert(tool, false)),
        // A call whose arguments Mint cannot read (a number past f64's range, such as `1e400`,
        // which a receiver may still take) is shown as unreadable, never as having none.
        arguments: hold.call.map(|call| match call_arguments.get(call) {
            Some(value) => arguments(value),
            None => UNREADABLE_ARGUMENTS.to_owned(),
        }),
        aliases,
    }
}

/// The `params.arguments` of each JSON-RPC `tools/call` message of a decoded body, in body order
/// (JSON Lines and batches expanded; `null` for a call without arguments). Members are matched as
/// `mcp_call` matches them ([`mcp_call::reads_as`]: case-folded, cut at U+0000), so the calls are
/// the ones it named, in the same order. A call whose `params` spell `arguments` several ways
/// (`arguments` and `ARGUMENTS`) is shown with every spelling: a case-folding receiver may run
/// any of them, and the operator must not be shown only one. The body was already read strictly
/// by `mcp_call` (no duplicate member, at most an MCP message long when it holds a call).
fn tool_arguments(body: &[u8]) -> Vec<serde_json::Value> {
    use serde_json::Value;
    let body = body.strip_prefix("\u{feff}".as_bytes()).unwrap_or(body);
    let member = |object: &serde_json::Map<String, Value>, name: &str| -> Vec<(String, Value)> {
        object
            .iter()
            .filter(|(key, _)| mcp_call::reads_as(key, name))
            .map(|(key, value)| (key.clone(), value.clone()))
            .collect()
    };
    let mut found = Vec::new();
    let mut push =
        |message: &Value| {
            let Value::Object(message) = message else {
                return;
            };
            let is_call = member(message, "method")
                .first()
                .and_then(|(_, method)| {
                    method.as_str().map(|m| mcp_call::reads_as(m, "tools/call"))
                })
                .unwrap_or(false);
            if !is_call {
                return;
            }
            let params = member(message, "params");
            let arguments = match params.first() {
                Some((_, Value::Object(params))) => member(params, "arguments"),
                _ => Vec::new(),
            };
            found.push(match arguments.len() {
            0 => Value::Null,
            1 => arguments.into_iter().next().map(|(_, v)| v).unwrap_or(Value::Null),
            _ => {
                let spellings: serde_json::Map<String, Value> = arguments.into_iter().collect();
                serde_json::json!({
                    "several spellings of `arguments` (a receiver may run any of them)": spellings
                })
            }
        });
        };
    for text in serde_json::Deserializer::from_slice(body).into_iter::<Value>() {
        match text {
            Ok(Value::Array(batch)) => batch.iter().for_each(&mut push),
            Ok(message) => push(&message),
            Err(_) => break,
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_found_per_call_in_body_order() {
        let body = br#"[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","arguments":{"x":1}}},
            {"jsonrpc":"2.0","method":"notifications/x"},
            {"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"a"}}]"#;
        let found = tool_arguments(body);
        assert_eq!(
            found,
            vec![serde_json::json!({"x": 1}), serde_json::Value::Null]
        );
        assert!(tool_arguments(b"not json").is_empty());
    }
}
